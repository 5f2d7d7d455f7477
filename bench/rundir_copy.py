"""How long a run directory's checkpoints take to reach the kernel from a host that does
not see it: a ~200 MB checkpoint sent by the chief as it saves it (``engine/loop.save``,
``kernel/unshared.py``, through ipyparallel's ``publish_data``) and the run's files pulled
at its end (``files.pull_run_files``), against the same run on a local engine, which
writes its checkpoints into the kernel's directory itself (the baseline, same process).

    python bench/rundir_copy.py            # MLP 64-4096x4-10: 50.6 M parameters, 202 MB
    python bench/rundir_copy.py --quick    # MLP 64-1024-10: 0.08 M parameters

Lag of a checkpoint: from the end of the chunk of steps it follows (the step row's time)
to the moment the kernel's run directory names it (``checkpoint_step()``, polled every
20 ms): saving, for an unshared host also reading, sending and writing the files. One
SSH engine on each of 2 emulated hosts with a private workbench home (``wb.testbed(
private=...)``), unshaped links; strategy ``single`` on one of them. Needs root.
Results go to bench/results/rundir_copy.json.
"""

import argparse
import json
import statistics
import sys
import time
import warnings

from shared import OUT
import workbench as wb
from workbench.store import Home, RunDir



def follow(run):
    """{checkpoint step: time.time() the kernel's run directory first named it} while
    ``run`` trains."""
    store, seen = RunDir(run.run_dir), {}
    while not run.done:
        step = store.checkpoint_step()
        if step is not None and step not in seen:
            seen[step] = time.time()
        time.sleep(0.02)
    return seen


def lags(run, seen):
    """Seconds from each periodic checkpoint's step row to the kernel seeing it."""
    h = run.history
    return {s: round(t - float(h[h.step == s].time.max()), 3) for s, t in sorted(seen.items()) if s < run.job.steps}


def one(cluster, model, steps, every):
    run = cluster.train(model, wb.datasets.digits(), strategy="single", workers=1, global_batch_size=32, steps=steps,
                        checkpoint_every=every, learning_rate=0.01, seed=0)
    seen = follow(run)
    run.wait()
    return run, seen, round(time.time() - run.started, 2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    hidden = (1024,) if args.quick else (4096,) * 4
    steps, every = (30, 10) if args.quick else (40, 10)
    model = wb.models.mlp(hidden)
    results = {}
    with wb.Cluster(engines=1) as local:
        run, seen, wall = one(local, model, steps, every)
        size = sum(f.stat().st_size for f in RunDir(run.run_dir).checkpoints_dir.glob(f"ckpt-{steps}.*"))
        results["local engine (baseline)"] = {"lag_s": lags(run, seen), "wall_s": wall}
    print(f"checkpoint: {size / 1e6:.1f} MB")
    try:
        bed = wb.testbed(hosts=2, private=[str(Home().path)])
    except wb.TestbedError as e:
        print(f"rundir_copy benchmark skipped: {e}")
        return 0
    with bed, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(gRPC servers|do not see this kernel's run directory)")
        with wb.Cluster(**bed.ssh_cluster(1), timeout=120) as cluster:
            run, seen, wall = one(cluster, model, steps, every)
            assert run.unshared_hosts, "the bed's hosts should not see the run directory"
            row = {"lag_s": lags(run, seen), "wall_s": wall}
            # the end's pull again, timed alone: every checkpoint the manager keeps, TensorBoard, metrics
            from workbench.kernel.runs import files

            task = run.tasks[0]
            t0 = time.monotonic()
            copied = files.pull_run_files(cluster.client, [task], str(run.run_dir), task.name, timeout=600)
            row["end_pull_s"] = round(time.monotonic() - t0, 2)
            row["end_pull_files"] = copied
            row["end_pull_MB"] = round(sum(f.stat().st_size for f in RunDir(run.run_dir).path.rglob("*")
                                           if f.is_file() and "checkpoints" in f.parts) / 1e6, 1)
            results["unshared host"] = row
    base = statistics.median(results["local engine (baseline)"]["lag_s"].values())
    ship = statistics.median(results["unshared host"]["lag_s"].values())
    data = {"meta": {"quick": args.quick, "hidden": hidden, "steps": steps, "checkpoint_every": every,
                     "checkpoint_MB": round(size / 1e6, 1), "time": round(time.time(), 0)},
            "results": results, "lag_unshared_over_local": round(ship / base, 2) if base else None}
    OUT.mkdir(exist_ok=True)
    (OUT / "rundir_copy.json").write_text(json.dumps(data, indent=1))
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
