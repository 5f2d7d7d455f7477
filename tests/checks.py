"""What many tests check or wait for: the one deadline loop, the one weight comparison, and
the one way a test ends a process tree it started."""

import signal
import subprocess
import time

import numpy as np


def wait_for(condition, timeout, what, every=0.05):
    """``condition()``'s first true value, polled until ``timeout`` seconds; past it, an
    AssertionError saying what was awaited (``what()``, the state seen)."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < end, f"timed out after {timeout} s waiting for {what()}"
        time.sleep(every)


def stop_process_tree(proc, what, ask=signal.SIGTERM, timeout=60):
    """End ``proc`` (a Popen this test started) and wait until it and every process it had
    started are gone: ``ask`` first (it stops its own children), SIGKILL after ``timeout``;
    past the deadline, an AssertionError naming ``what`` is left."""
    from workbench.kernel.engines.processes import alive, family

    processes = family([proc.pid])
    proc.send_signal(ask)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
    wait_for(lambda: not [p for p in processes if alive(p)], timeout,
             lambda: f"{what} still running: {[p for p in processes if alive(p)]}")


def relative_difference(a, b):
    """||a - b|| / ||b|| over all the arrays of two weight lists, in float64."""
    a = np.concatenate([w.ravel() for w in a]).astype("float64")
    b = np.concatenate([w.ravel() for w in b]).astype("float64")
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def bed_cluster(bed, engines, **options):
    """A started cluster whose engines run on ``bed``'s hosts over SSH (``engines``: per
    host, or {host: n}); the UserWarnings its start gave are in ``.start_warnings``. A
    module's fixture yields it and stops it."""
    import warnings

    import workbench as wb

    c = wb.Cluster(**bed.ssh_cluster(engines), timeout=120, **options)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        c.start()
    c.start_warnings = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    return c


def exposure_warned(cluster):
    """Engines on a network: the start warned, once, that TF's gRPC servers listen on every interface."""
    return sum("TensorFlow's gRPC servers" in w for w in cluster.start_warnings) == 1


def recorded_run(path, rows, result=None, **record):
    """A run directory under ``path`` (a workbench home) as a run leaves it: ``run.json``
    (``record`` over a 2-worker MWMS run of 400 steps, global batch 64), ``rows`` in each
    worker's metrics file, and ``result.json`` when ``result`` is given. Returns it."""
    import json

    from workbench import store

    run_dir = path / "runs" / record.get("run_id", "20260101-000000-abcdef")
    (run_dir / "metrics").mkdir(parents=True, exist_ok=True)
    store.write_json(run_dir / "run.json", {"run_id": run_dir.name, "strategy": "multi_worker_mirrored", "workers": 2,
                                              "ps": 0, "steps": 400, "global_batch_size": 64, "started": 999.0,
                                              "steps_per_execution": 1, "tasks": [], **record})
    for w in sorted({r["worker"] for r in rows}):
        with open(run_dir / "metrics" / f"{w}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows if r["worker"] == w)
    if result is not None:
        store.write_json(run_dir / "result.json", {"error": None, "stopped": False, "evaluation": None, **result})
    return run_dir
