"""Simulated scale: the kernel's cost against the number of workers, with no engine.

    python bench/simulated_scale.py [--quick] [--workers 64 256 1024] [--seconds 12]

For 64, 256 and 1,024 simulated workers at 10 steps/s each (bench/simulated.py: a
generator process publishes the engines' real rows and windows; the kernel's real ``Run``
watcher and ``Dashboard`` take them), per N: the CPU of the kernel's threads as a
fraction of one core (the watcher merging into ``run.history``, the dashboard redrawing at
4 Hz, the stand-in for ipyparallel's IO thread unpickling publishes), the metrics latency
(row made -> in the widget's model), ``run.history`` and ``run.placement`` (a PS layout of
400 variables) built once at the end. Then the panel's state API
(``records.Records.state``) over 1,000 runs on disk. The same N is also run with the old
publish window (the last 2,048 rows every publish) unless --quick.

Targets (issue 25): at 256 workers, dashboard <= 25% of a core and latency median <= 0.5 s;
the state API <= 100 ms with 1,000 runs. Results: bench/results/simulated_scale.json, .md.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import simulated
from shared import OUT, machine
from workbench.engine import metrics  # noqa: E402


def fill_home(home, runs=1000, rows=200, seed=0):
    """``runs`` finished runs under ``home/runs`` as a run leaves them (run.json, result.json,
    two workers' metrics), the newest one still running in this process."""
    from workbench.store.files import write_json

    rng = random.Random(seed)
    t0 = time.time() - runs * 60
    for i in range(runs):
        d = Path(home) / "runs" / f"2026{i:06d}-sim"
        (d / "metrics").mkdir(parents=True)
        started = t0 + 60 * i
        tasks = [{"role": "worker", "index": k, "engine": k} for k in range(2)]
        write_json(d / "run.json", {"run_id": d.name, "strategy": "multi_worker_mirrored", "workers": 2, "ps": 0,
                                    "steps": rows, "started": started, "kernel_pid": os.getpid(), "tasks": tasks})
        if i < runs - 1:
            write_json(d / "result.json", {"final_step": rows, "finished": started + 30, "error": None,
                                           "stopped": False})
        for k in range(2):
            lines = [json.dumps({"step": s, "worker": f"worker:{k}", "loss": 2.3 * 0.99 ** s + rng.random() * 0.01,
                                 "examples_per_s": 5000.0, "time": started + s * 0.1}) for s in range(1, rows + 1)]
            (d / "metrics" / f"worker:{k}.jsonl").write_text("\n".join(lines) + "\n")


def state_api(runs, repeats=5):
    """Seconds per ``Records.state()`` (what ``GET /workbench/api/state`` answers, JSON included):
    the first call of a fresh server, then the next polls."""
    from workbench.store import Records

    home = tempfile.mkdtemp(prefix="wb-sim-home-")
    try:
        fill_home(home, runs=runs)
        book = Records(home)
        times = []
        for _ in range(repeats + 1):
            t = time.perf_counter()
            state = book.state()
            json.dumps(state)
            times.append(time.perf_counter() - t)
        return {"runs_on_disk": runs, "runs_listed": len(state["runs"]), "first_s": times[0],
                "poll_s_median": statistics.median(times[1:])}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def window_cost(workers=(64, 256, 1024), repeats=20):
    """A run past 205 s at 10 steps/s: what each publish costs the kernel with the old window
    (the last 2,048 rows) and the new (the rows of the last 50 publishes: 100 rows), measured
    per publish and projected to N workers publishing 5 times a second. Unpickling is the
    client's IO thread; merging is the watcher (the old merge scanned the whole window every
    poll, 20 polls a second; the new one takes only rows past the task's last count)."""
    import pickle
    import random

    rng = random.Random(0)
    rows = [simulated.row("worker:0", s, rng) for s in range(1, 3001)]
    out = {}
    run_dir = tempfile.mkdtemp(prefix="wb-sim-")
    run = simulated.make_run(1, run_dir)
    try:
        run.log.merge({"packed": metrics.pack(rows), "n": len(rows)}, "worker:0")
        for label, size in (("old", 2048), ("new", 100)):
            # the old window in the old form (dict rows), the new packed (engine/metrics.py)
            window = {"rows": rows[-size:]} if label == "old" else {"packed": metrics.pack(rows[-size:])}
            blob = pickle.dumps(dict(window, events=[], n=len(rows)), protocol=5)
            t = time.thread_time()
            for _ in range(repeats):
                data = pickle.loads(blob)
            unpickle = (time.thread_time() - t) / repeats
            t = time.thread_time()
            for _ in range(repeats):  # a poll that finds no new row
                run.log.merge(data, None if label == "old" else "worker:0")
            merge = (time.thread_time() - t) / repeats
            out[label] = {"rows": size, "unpickle_ms": unpickle * 1000, "merge_ms": merge * 1000,
                          "projected_core": {n: n * (5 * unpickle + 20 * merge) for n in workers}}
    finally:
        for r in run.results.values():
            r.finish()
        run.join(30)  # its watcher writes the run's result file last
        shutil.rmtree(run_dir, ignore_errors=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--workers", type=int, nargs="*")
    p.add_argument("--seconds", type=float)
    args = p.parse_args(argv)
    workers = args.workers or ([16] if args.quick else [64, 256, 1024])
    seconds = args.seconds or (3.0 if args.quick else 12.0)
    rows = []
    for n in workers:
        for old in ([False] if args.quick else [False, True]):
            r = simulated.simulate(n, seconds=seconds, old_window=old)
            print(json.dumps(r), flush=True)
            rows.append(r)
    windows = window_cost()
    api = state_api(100 if args.quick else 1000, repeats=2 if args.quick else 5)
    result = {"results": {"simulated": rows, "state_api": api, "window_cost": windows},
              "meta": {"quick": args.quick, "seconds": seconds, "machine": machine()}}
    OUT.mkdir(exist_ok=True)
    (OUT / "simulated_scale.json").write_text(json.dumps(result, indent=1))
    md = [f"Simulated workers at 10 steps/s each, {seconds:.0f} s per row; kernel threads' CPU as a fraction of "
          f"one core; machine: {result['meta']['machine']}", "",
          "| workers | publish window | watcher | dashboard (4 Hz) | client IO (unpickle) | latency median (p90) "
          "| rows merged / offered | history build | placement (413 rows) |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        c = r["cpu_core_fraction"]
        md.append(f"| {r['workers']} | {'2,048 rows (old)' if r['old_window'] else 'last 50 publishes'} "
                  f"| {c['watcher']:.1%} | {c.get('dashboard', 0):.1%} | {c['client IO']:.1%} "
                  f"| {_s(r['latency_s_median'])} ({_s(r['latency_s_p90'])}) "
                  f"| {r['rows_merged']:,} / {r['rows_offered']:,} | {r['history_build_s'] * 1000:.0f} ms "
                  f"| {r['placement_s'] * 1000:.0f} ms |")
    md += ["", "A run past 205 s (10 steps/s): each publish's cost to the kernel, and projected to N workers "
               "(5 publishes/s unpickled + 20 watcher polls/s):", "",
           "| publish window | rows | unpickle | poll with no new row | projected: "
           + " | ".join(f"{n} workers" for n in windows["old"]["projected_core"]) + " |",
           "| --- | --- | --- | --- | " + " | ".join("---" for _ in windows["old"]["projected_core"]) + " |"]
    for label, w in windows.items():
        md.append(f"| {label} | {w['rows']:,} | {w['unpickle_ms']:.2f} ms | {w['merge_ms']:.3f} ms | "
                  + " | ".join(f"{v:.0%} of a core" for v in w["projected_core"].values()) + " |")
    md += ["", f"Panel state API (`Records.state()` + JSON) with {api['runs_on_disk']:,} runs on disk "
               f"({api['runs_listed']} listed): first call {api['first_s'] * 1000:.0f} ms, "
               f"then {api['poll_s_median'] * 1000:.0f} ms per poll (median; target <= 100 ms)", ""]
    (OUT / "simulated_scale.md").write_text("\n".join(md))
    print("\n".join(md))


def _s(seconds):
    return "n/a" if seconds is None else f"{seconds:.2f} s"


if __name__ == "__main__":
    main()
