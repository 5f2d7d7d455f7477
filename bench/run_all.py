"""Every benchmark, one after the other, then plots and one summary.

    python bench/run_all.py           # full: ~30 minutes on 2 cores
    python bench/run_all.py --quick   # smoke: every benchmark in its tiny mode (~4 minutes)

Runs strategies.py, dashboard.py, versus_peer.py, ceilings.py, network.py, anatomy.py,
packing.py, simulated_scale.py and scale.py (each writes its JSON and Markdown table to
bench/results/; scale.py also draws scale.png), then draws the other bench/results/*.png from the JSON and
gathers the tables into bench/results/summary.md. Every figure is a ratio of two things
measured in the same run, alternated; no figure is compared between runs.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import versus_peer  # bench/: its results' keys

HERE = Path(__file__).resolve().parent
OUT = HERE / "results"
BENCHMARKS = ["strategies", "dashboard", "versus_peer", "ceilings", "network", "anatomy", "packing", "simulated_scale",
              "scale"]


def _load(name):
    return json.loads((OUT / f"{name}.json").read_text())


def _bars(ax, labels, summaries, title, targets=None, unit=""):
    """Median bars with min-max whiskers, and each bar's target (if any) as a red mark."""
    med = [s["median"] for s in summaries]
    err = [[m - s["min"] for m, s in zip(med, summaries)], [s["max"] - m for m, s in zip(med, summaries)]]
    ax.barh(range(len(labels)), med, xerr=err, color="#4c72b0", capsize=3)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(unit, fontsize=8)
    if targets:
        marks = [(t, i) for i, t in enumerate(targets) if t is not None]
        ax.plot([t for t, _ in marks], [i for _, i in marks], "|", color="#c44e52", markersize=18,
                markeredgewidth=2, label="target")
        ax.legend(fontsize=7, loc="lower right")


def plots():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = []
    strategies = _load("strategies")["results"]
    fig, axes = plt.subplots(1, len(strategies), figsize=(6 * len(strategies), 3.2))
    for ax, (workload, rows) in zip(list(getattr(axes, "flat", [axes])), strategies.items()):
        names = [n for n, r in rows.items() if isinstance(r, dict)]
        _bars(ax, names, [{"median": rows[n]["steps_per_s_median"], "min": rows[n]["min"], "max": rows[n]["max"]}
                          for n in names], workload, unit="steps/s")
    fig.tight_layout()
    fig.savefig(OUT / "strategies.png", dpi=110)
    drawn.append("strategies.png")

    peer = _load("versus_peer")["results"]
    targets = {("digits", "MWMS"): 0.98, ("wide", "MWMS"): 0.98, ("digits", "PSS"): 1.8, ("wide", "PSS"): 1.25,
               ("wide_2000", "PSS"): 1.25}
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.2))
    rows = [(w, label, r) for w, by_label in peer.items() if w != "start" for label, r in by_label.items()]
    for ax, kind in zip(axes, ("MWMS", "PSS")):
        picked = [(w, label, r) for w, label, r in rows if label.startswith(kind)]
        if not picked:
            ax.set_visible(False)
            continue
        # MWMS: against TF's best loop, bursts closely alternated (the 0.98 target's measure);
        # PSS: against the tutorial's loop
        best = [r.get(versus_peer.BEST_BURSTS, {}).get("ratio") for _, _, r in picked]
        _bars(ax, [f"{w}: {label}" for w, label, _ in picked],
              [b if b is not None else r["ratio"] for b, (_, _, r) in zip(best, picked)],
              f"{kind}: workbench / " + ("TF's best loop" if kind == "MWMS" else "TF tutorial's loop"),
              targets=[targets[(w, kind)] for w, _, _ in picked], unit="ratio")
    fig.tight_layout()
    fig.savefig(OUT / "versus_peer.png", dpi=110)
    drawn.append("versus_peer.png")

    start = peer["start"]
    fig, ax = plt.subplots(figsize=(8, 2.6))
    _bars(ax, list(start), list(start.values()), "start and re-run latency", unit="s",
          targets=[10 if n.startswith("workbench cold") else 2 if "re-run" in n else None for n in start])
    fig.tight_layout()
    fig.savefig(OUT / "start.png", dpi=110)
    drawn.append("start.png")

    ceilings = _load("ceilings")["results"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 2.6))
    compute, reduce = ceilings["compute"], ceilings["all-reduce"]
    _bars(axes[0], ["workbench / matmul", "plain TF loop / matmul", "workbench / plain TF loop"],
          [compute["workbench / matmul"], compute["plain TF loop / matmul"], compute["workbench / plain TF loop"]],
          f"compute: {compute['model']}", targets=[0.8, None, None], unit="ratio")
    _bars(axes[1], ["per-variable / packed", "packed / loopback TCP"],
          [reduce["per-variable / packed"], reduce["packed / loopback"]], "all-reduce, 2 workers",
          targets=[0.95, None], unit="ratio")
    fig.tight_layout()
    fig.savefig(OUT / "ceilings.png", dpi=110)
    drawn.append("ceilings.png")
    plt.close("all")
    scale = _load("scale")
    if scale.get("plot"):  # cost against N engines, drawn by scale.py with its fits
        drawn.append(scale["plot"])
    return drawn


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    seconds = {}
    for name in BENCHMARKS:
        t0 = time.time()
        print(f"== {name}", flush=True)
        subprocess.run([sys.executable, str(HERE / f"{name}.py")] + (["--quick"] if args.quick else []), check=True)
        seconds[name] = round(time.time() - t0, 1)
    drawn = plots()
    parts = [f"# Benchmarks ({'quick' if args.quick else 'full'})", "",
             f"Seconds per benchmark: {seconds}", ""]
    for name in BENCHMARKS:
        parts += [f"## {name}", "", (OUT / f"{name}.md").read_text(), ""]
    parts += [f"![{d}]({d})" for d in drawn]
    (OUT / "summary.md").write_text("\n".join(parts) + "\n")
    (OUT / "run_all.json").write_text(json.dumps({"quick": args.quick, "seconds": seconds, "plots": drawn}))
    print(f"wrote {OUT / 'summary.md'} and {', '.join(drawn)}")


if __name__ == "__main__":
    main()
