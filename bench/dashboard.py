"""Cost of the live views: MWMS throughput with every task's output captured and streamed
(``logs=True``, the default) vs without (``logs=False``), and with the dashboard updating
vs without, runs alternated on the same engines; the CPU time each engine's output-capture
and debug threads (``engine/tasklogs.py``, ``engine/startup/debug.py``: what being ready to
take stacks costs) use during a run with logs, as a share of the engine's CPU time (read
inside the engine through ``run.console``: a steps/s ratio this noisy cannot show 1%);
and the metrics latency from a step ending on an engine to its point in the widget's
model (same machine, same clock).

    python bench/dashboard.py [--quick]

Results go to bench/results/dashboard.json and .md.
"""

import argparse
import json
import statistics
import time

import workbench as wb

from shared import OUT, machine, steady, summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    repeats, steps = (1, 1200) if args.quick else (5, 1500)  # quick: > 1 s even at 1,000 steps/s: several updates
    digits = wb.datasets.digits()
    on, off, no_logs, latencies, shares = [], [], [], [], []
    with wb.Cluster(engines=2) as cluster:
        for repeat in range(repeats):
            order = ("no logs", "logs", "dashboard")
            for kind in order if repeat % 2 == 0 else order[::-1]:  # each one first every other repeat
                run = cluster.train(wb.models.mlp((64, 32)), digits, strategy="multi_worker_mirrored", workers=2,
                                    global_batch_size=128, steps=steps, checkpoint_every=0, dashboard=False,
                                    logs=kind != "no logs")
                if kind == "dashboard":
                    dash = run.dashboard(interval=0.25)
                if kind == "logs":
                    shares += thread_shares(run, steps)
                run.wait()
                if kind == "dashboard":
                    dash._thread.join(10)
                    latencies += dash.latencies[:-1]  # the last update comes after the run ended
                {"no logs": no_logs, "logs": off, "dashboard": on}[kind].append(steady(run))
    logs = [a / b for a, b in zip(off, no_logs)]  # each pair of one repeat
    result = {
        "steps_per_s_with_dashboard": on, "steps_per_s_without": off, "steps_per_s_without_logs": no_logs,
        "ratio_median": statistics.median(on) / statistics.median(off),
        "logs_ratio": summary(logs),
        "ready_threads_cpu_share": summary(shares) if shares else None,
        "latency_s_median": statistics.median(latencies) if latencies else None,
        "latency_s_p90": sorted(latencies)[int(0.9 * (len(latencies) - 1))] if latencies else None,
        "latency_samples": len(latencies),
        "meta": {"repeats": repeats, "steps": steps, "quick": args.quick, "machine": machine()},
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "dashboard.json").write_text(json.dumps(result, indent=1))
    md = (f"MWMS x2, digits MLP, batch 128, {repeats} repeats of 3 alternated runs of {steps} steps; machine: {result['meta']['machine']}\n\n"
          f"| figure | value | target |\n| --- | --- | --- |\n"
          f"| steps/s with every task's output captured and streamed / without (logs=True / False, "
          f"median [min-max] of the repeats' ratios) | {_ratio(result['logs_ratio'])} "
          f"({statistics.median(off):.0f} / {statistics.median(no_logs):.0f}) | >= 0.99 |\n"
          f"| CPU time of each engine's output-capture and debug threads / the engine's CPU time, during "
          f"steady steps with logs (median [min-max] over {len(shares)} task readings) | {_pct(result['ready_threads_cpu_share'])} "
          f"| < 1% |\n"
          f"| steps/s with dashboard / without (median) | {result['ratio_median']:.3f} "
          f"({statistics.median(on):.0f} / {statistics.median(off):.0f}) | >= 0.98 |\n"
          f"| metrics latency, engine step end -> widget model, median | {_s(result['latency_s_median'])} "
          f"(p90 {_s(result['latency_s_p90'])}, {len(latencies)} updates) | <= 0.5 s |\n")
    (OUT / "dashboard.md").write_text(md)
    print(md)


# run inside an engine by its console: the CPU nanoseconds of its threads by name (Linux
# schedstat), and of the whole process so far
_THREAD_CPU = """
import json, os, threading, time
def _ns(tid):
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except OSError:
        return 0
print(json.dumps({"process": time.process_time_ns(),
                  "threads": {t.name: _ns(t.native_id) for t in threading.enumerate()}}))
"""
READY = ("workbench-task-output", "workbench-debug")  # the console's own request thread is not counted


def thread_shares(run, steps):
    """For each task of ``run`` while it trains: the CPU its output-capture and debug threads
    used between steps/4 and 3 steps/4, over its process's CPU in that time. Empty when the
    run ended before the second reading."""
    consoles = {t.name: run.console(t.name) for t in run.tasks}
    readings = []
    for target in (steps // 4, 3 * steps // 4):
        while run.step < target and not run.done:
            time.sleep(0.02)
        if run.done:
            return []
        readings.append({name: json.loads(c(_THREAD_CPU)) for name, c in consoles.items()})
    shares = []
    for name in consoles:
        a, b = readings[0][name], readings[1][name]
        ready = sum(b["threads"].get(n, 0) - a["threads"].get(n, 0) for n in READY)
        shares.append(ready / max(1, b["process"] - a["process"]))
    return shares


def _pct(s):
    return "n/a (the runs ended before the second reading)" if s is None else \
        f"{100 * s['median']:.3f}% [{100 * s['min']:.3f}-{100 * s['max']:.3f}%]"


def _ratio(s):
    return f"{s['median']:.3f} [{s['min']:.3f}-{s['max']:.3f}]"


def _s(seconds):
    return "n/a" if seconds is None else f"{seconds:.3f} s"


if __name__ == "__main__":
    main()
