"""The control plane's cost against the number of engines, on real local clusters.

    python bench/scale.py [--quick] [--engines 2 4 8 16] [--steps 200]

Per N engines (one after the other, each a fresh cluster; the tiny model
``wb.models.mlp((16,))`` on digits, MWMS over all N engines): ``Cluster()`` to all
engines ready; ``train()`` to the first step, and again for a re-run of the same topology;
the kernel process's CPU per 1,000 metrics rows (while the run trains: ipyparallel's IO
thread, the run's watcher, everything in the kernel) and the watcher thread's CPU as a
fraction of a core; ``cluster.stop()``; each engine's memory (PSS and RSS, from /proc)
after training. Printed as a table, with each cost's growth fitted as cost ~ N^k (k ~ 0
constant, ~1 linear, > 1.3 worse) and plotted against N (bench/results/scale.png).
Results: bench/results/scale.json and .md. ``--quick``: N = 2 only, few steps.
"""

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import workbench as wb

from shared import OUT, machine, thread_cpu

COSTS = {  # key: (label, unit)
    "ready_s": ("Cluster() -> all engines ready", "s"),
    "first_step_s": ("train() -> first step", "s"),
    "rerun_first_step_s": ("re-run, same topology -> first step", "s"),
    "kernel_cpu_per_1000_rows_s": ("kernel CPU per 1,000 rows", "CPU-s"),
    "watcher_cpu_core": ("watcher CPU while training", "fraction of a core"),
    "stop_s": ("cluster.stop()", "s"),
    "engine_pss_mb": ("memory per engine (PSS, median)", "MB"),
}


def memory(pid):
    """(PSS, RSS) of a process in MB, from /proc/<pid>/smaps_rollup."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Pss", "Rss"):
                    out[key] = int(rest.split()[0]) / 1024
    except OSError:
        return None, None
    return out.get("Pss"), out.get("Rss")


def first_step(run, t0, timeout=600):
    end = time.monotonic() + timeout
    while run.step < 1:
        if run.done or time.monotonic() > end:
            run.wait(1)  # raises the engines' error, if any
            raise RuntimeError(f"no first step within {timeout} s: {run}")
        time.sleep(0.01)
    return float(run.history.time.min()) - t0


def one(n, steps):
    model, data = wb.models.mlp((16,)), wb.datasets.digits()
    kw = dict(strategy="multi_worker_mirrored", workers=n, global_batch_size=16 * n, steps=steps,
              checkpoint_every=0, eval_every=0, dashboard=False)
    t0 = time.time()
    cluster = wb.Cluster(engines=n).start()
    out = {"engines": n, "ready_s": time.time() - t0}
    try:
        t0 = time.time()
        run = cluster.train(model, data, **kw)
        out["first_step_s"] = first_step(run, t0)
        cpu0, watch0, w0 = time.process_time(), thread_cpu(run.watcher.thread), time.monotonic()
        rows0 = run.log.rows
        while not run.done:  # the watcher's own thread ends with the run: read it while alive
            watch1, w1, cpu1, rows1 = thread_cpu(run.watcher.thread), time.monotonic(), time.process_time(), run.log.rows
            time.sleep(0.2)
        run.wait()
        rows = rows1 - rows0
        out["kernel_cpu_per_1000_rows_s"] = (cpu1 - cpu0) / max(rows, 1) * 1000
        out["watcher_cpu_core"] = (watch1 - watch0) / max(w1 - w0, 1e-9)
        out["rows"] = len(run.history)
        out["steps_per_s"] = run.job.steps / max(float(run.history.time.max() - run.history.time.min()), 1e-9)
        mem = [memory(cluster.engine_info[t.engine_id].pid) for t in run.tasks]
        out["engine_pss_mb"] = sorted(m[0] for m in mem)[len(mem) // 2]
        out["engine_rss_mb"] = sorted(m[1] for m in mem)[len(mem) // 2]
        t0 = time.time()
        again = cluster.train(model, data, **dict(kw, steps=20))
        out["rerun_first_step_s"] = first_step(again, t0)
        again.wait()
    finally:
        t0 = time.time()
        cluster.stop()
        out["stop_s"] = time.time() - t0
    return out


def fit(ns, values):
    """Exponent k of cost ~ a N^k (least squares on logs) and what it says."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(ns, values) if v and v > 0]
    if len(pts) < 2:
        return None, "n/a"
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    k = sum((x - mx) * (y - my) for x, y in pts) / max(sum((x - mx) ** 2 for x, _ in pts), 1e-12)
    return k, "constant" if k < 0.3 else "sublinear" if k < 0.8 else "linear" if k < 1.3 else "worse than linear"


def plot(rows, fits):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["engines"] for r in rows]
    fig, axes = plt.subplots(1, len(COSTS), figsize=(3.1 * len(COSTS), 3.0))
    for ax, (key, (label, unit)) in zip(axes, COSTS.items()):
        ax.plot(ns, [r.get(key) for r in rows], "o-", color="#4c72b0")
        k, kind = fits[key]
        ax.set_title(f"{label}\n~N^{k:.2f} ({kind})" if k is not None else label, fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("engines", fontsize=8)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "scale.png", dpi=110)
    plt.close(fig)
    return "scale.png"


def cold_start(pairs, engines=4):
    """Zygote start against each engine importing TensorFlow, alternated in this run:
    ``Cluster(engines=4)`` to the first step of a PSS run (1 PS + 2 workers + its chief),
    then a different topology (MWMS over all engines: every engine recycled) to its first
    step. ``--quick``: 3 engines (PSS with one worker), one pair."""
    model, data = wb.models.mlp((16,)), wb.datasets.digits()
    rows = []
    for i in range(pairs):
        for zygote in ((True, False) if i % 2 == 0 else (False, True)):
            os.environ["WORKBENCH_ZYGOTE"] = "1" if zygote else "0"
            t0 = time.time()
            cluster = wb.Cluster(engines=engines).start()
            try:
                row = {"zygote": zygote, "forked": cluster.started_by_zygote, "ready_s": time.time() - t0}
                run = cluster.train(model, data, strategy="parameter_server", workers=engines - 2, ps=1, global_batch_size=64,
                                    steps=20, checkpoint_every=0, dashboard=False)
                row["first_pss_step_s"] = first_step(run, t0)
                run.wait(timeout=300)
                t1 = time.time()
                run = cluster.train(model, data, strategy="multi_worker_mirrored", workers=engines,
                                    global_batch_size=16 * engines, steps=20, checkpoint_every=0, dashboard=False)
                row["recycle_first_step_s"] = first_step(run, t1)
                run.wait(timeout=300)
            finally:
                cluster.stop()
            print(json.dumps(row), flush=True)
            rows.append(row)
    os.environ.pop("WORKBENCH_ZYGOTE", None)
    out = {}
    for key in ("ready_s", "first_pss_step_s", "recycle_first_step_s"):
        on = statistics.median(r[key] for r in rows if r["zygote"])
        off = statistics.median(r[key] for r in rows if not r["zygote"])
        out[key] = {"zygote": on, "import per engine": off, "ratio": on / off}
    return {"pairs": pairs, "engines": engines, "rows": rows, "median": out}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--engines", type=int, nargs="*")
    p.add_argument("--steps", type=int)
    p.add_argument("--add", nargs="*", default=[], help="scale.json files of earlier runs (other N) to report with")
    p.add_argument("--no-cold-start", dest="cold_start", action="store_false",
                   help="leave out the zygote-vs-import cold start pairs")
    args = p.parse_args(argv)
    ns = args.engines if args.engines is not None else ([2] if args.quick else [2, 4, 8, 16])  # --engines alone: none
    steps = args.steps or (30 if args.quick else 200)
    rows = [r for path in args.add for r in json.loads(Path(path).read_text())["results"]["rows"]]
    for n in ns:
        r = one(n, steps)
        print(json.dumps(r), flush=True)
        rows.append(r)
    start = (cold_start(1, engines=3) if args.quick else cold_start(3)) if args.cold_start else None
    report(rows, steps, args.quick, start)


def report(rows, steps, quick, start=None):
    rows = sorted(rows, key=lambda r: r["engines"])
    ns = [r["engines"] for r in rows]
    fits = {key: fit([r["engines"] for r in rows], [r.get(key) for r in rows]) for key in COSTS}
    OUT.mkdir(exist_ok=True)
    result = {"results": {"rows": rows, "fits": {k: {"exponent": v[0], "growth": v[1]} for k, v in fits.items()}},
              "meta": {"quick": quick, "steps": steps, "machine": machine()}}
    result["plot"] = plot(rows, fits)
    if start is not None:
        result["results"]["cold_start"] = start
    (OUT / "scale.json").write_text(json.dumps(result, indent=1))
    md = [f"Real local clusters, MWMS over all N engines, mlp((16,)) on digits, batch 16/worker, {steps} steps; "
          f"machine: {result['meta']['machine']}", "",
          "| cost | " + " | ".join(f"N={n}" for n in ns) + " | growth (cost ~ N^k) |",
          "| --- | " + " | ".join("---" for _ in ns) + " | --- |"]
    for key, (label, unit) in COSTS.items():
        k, kind = fits[key]
        md.append(f"| {label} ({unit}) | " + " | ".join(_v(r.get(key)) for r in rows) +
                  f" | {'n/a' if k is None else f'k = {k:.2f}, {kind}'} |")
    md.append("| steps/s (for reference) | " + " | ".join(_v(r.get("steps_per_s")) for r in rows) + " | |")
    md += ["", f"![scale]({result['plot']})", ""]
    if start is not None:
        md += [f"Cold start, {start['engines']} engines, {start['pairs']} alternated pair(s): zygote (engines fork "
               "from one process that imported TensorFlow) against each engine importing it", "",
               "| seconds (median) | zygote | import per engine | ratio |", "| --- | --- | --- | --- |"]
        for key, label in (("ready_s", "Cluster() to all engines ready"),
                           ("first_pss_step_s", "Cluster() to the first PSS step"),
                           ("recycle_first_step_s", "another topology (all engines recycled) to its first step")):
            m = start["median"][key]
            md.append(f"| {label} | {m['zygote']:.2f} | {m['import per engine']:.2f} | {m['ratio']:.2f} |")
        md.append("")
    (OUT / "scale.md").write_text("\n".join(md))
    print("\n".join(md))


def _v(x):
    return "n/a" if x is None else f"{x:.3g}" if x < 100 else f"{x:,.0f}"


if __name__ == "__main__":
    main()
