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
    started are gone: ``ask`` first (it stops its own children); whatever of them is still
    running ``timeout`` seconds later gets SIGKILL, each the process recorded before the
    signal (``psutil`` tells a reused PID apart), and the test prints so (CI once saw
    ipcluster neither stop its 13 processes nor exit in 60 s after SIGINT). Past 30 s
    more, an AssertionError naming ``what`` is left."""
    import psutil

    from workbench.kernel.engines.processes import family, running

    processes = []
    for pid in family([proc.pid]):
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    end = time.monotonic() + timeout
    proc.send_signal(ask)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass

    def left():
        return [p for p in processes if running(p)]

    while left() and time.monotonic() < end:
        time.sleep(0.05)
    if left():
        print(f"{what}: {[p.pid for p in left()]} still running {timeout} s after signal {ask!r}: SIGKILL")
        for p in left():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        try:
            proc.wait(30)  # reaped, if it was one of them
        except subprocess.TimeoutExpired:
            pass
    wait_for(lambda: not left(), 30, lambda: f"{what} still running after SIGKILL: {[p.pid for p in left()]}")


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


def hosts_of(run):
    """{host: [task name, ...]} of a run's tasks."""
    out = {}
    for t in run.tasks:
        out.setdefault(t.host, []).append(t.name)
    return out


def stop_once_replaced(run, lost, timeout):
    """Wait until the tasks ``lost`` are replaced (a worker_replaced event each) and the run
    has gone 100 steps further, then stop it: it stopped cleanly, every step reported once.
    (The runs are long: where engines registered in another order, the host that holds only
    workers holds one of the two, and the other worker alone outran the loss being noticed,
    ~4 s by heartbeat, before a short run ended.)"""
    def replaced():
        ev = run.events
        return "task" in ev and set(lost) <= set(ev[ev.kind == "worker_replaced"].task)

    try:
        wait_for(lambda: replaced() or run.done, timeout, lambda: f"{lost} replaced; events {run.events}")
        reached = run.step
        wait_for(lambda: run.step >= reached + 100 or run.done, 120, lambda: f"steps past {reached}: at {run.step}")
    finally:
        run.stop()
    assert run.stopped and run.error is None, f"{run.failure}"  # whole: the engine's traceback, TF's root errors
    assert sorted(run.history.step) == list(range(1, run.final_step + 1)), "every step reported exactly once"


def a_lost_host_of_workers_is_replaced_there(cluster, bed, run, timeout=300):
    """``run``, a live parameter-server run, loses every engine of the host that holds only
    its workers (``bed.kill_engines``): each of those workers is noted lost once and
    replaced once, by a fresh engine on that host at the same address and port (the ones
    the coordinator dials); the kill is the run's one injected fault; the run goes on and
    stops cleanly, every step reported once (``stop_once_replaced``). Returns the host and
    the PIDs killed. The same for every launcher (SSH, Slurm)."""
    placed = hosts_of(run)
    host = next(h for h, names in placed.items() if all(n.startswith("worker:") for n in names))
    lost = sorted(placed[host])
    before = {t.name: t for t in run.tasks}
    killed = bed.kill_engines(host)
    assert len(killed) >= len(lost)
    stop_once_replaced(run, lost, timeout=timeout)
    ev = run.events
    assert sorted(ev[ev.kind == "worker_lost"].task) == lost
    assert sorted(ev[ev.kind == "worker_replaced"].task) == lost, ev[ev.kind.str.startswith("worker")]
    for name in lost:  # a fresh engine on the same host and port: the coordinator's address
        new = next(t for t in run.tasks if t.name == name)
        assert new.engine_id != before[name].engine_id and new.target == before[name].target
        assert cluster.engine_info[new.engine_id].host == host
    injected = ev[ev.kind == "injected"]
    assert list(injected.fault) == ["kill_engines"] and list(injected.host) == [host]
    return host, killed
