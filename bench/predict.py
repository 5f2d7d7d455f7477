"""The cost model against the test bed: measured / predicted over a grid of runs.

    python bench/predict.py            # full: ~25 minutes on 2 cores (needs root: wb.testbed)
    python bench/predict.py --quick    # smoke: 5 cells
    python bench/predict.py --parts ring --workers 4 --bits int8 --out predict-int8   # a part of it

Ring all-reduce (multi_worker_mirrored) with 2, 3 and 4 workers x links of 50, 100 and 200
Mbit/s x MLPs of ~0.3, 1 and 4 MB of gradients x 32, 16 and 8-bit messages; parameter
servers with 1, 2 and 3 workers x 1 and 2 PS tasks; a model split across 2 workers
(``model_parallel``: an MLP 256-256-16-10 cut after its 16- or its 256-wide layer) x the
three rates. One engine per emulated host. Each
cell is one run explained by ``run.explain()``: the model takes the run's own compute and
overheads as measured and predicts its communication, so steps/s measured / predicted
tests the model of the network; bytes per link are the links' counters against the
formula's bytes in frames (``costmodel.wire_bytes``: headers and ACKs, as the counters read them). Targets (issue 38) where the link is the bottleneck: median steps/s ratio
in 0.9-1.1, every cell in 0.8-1.25, bytes per link in 0.95-1.1. Writes predict.json,
predict.md and predict.png (measured against predicted steps/s, a point per cell) to
bench/results/.

Then ``wb.predict`` answers for each cell from another cell's run (the ring's at 2 workers, the
parameter server's at 1 worker and 1 PS task, at 100 Mbit, same model and bits): its own
compute no longer known, the calibration's scaled to the cell's workers and cores, as for
runs not made (``cross_ratio``: measured / that prediction).

First, on unshaped links, ``wb.calibrate_links`` measures the bed's path (alpha, the CPU per
byte) with TF's ring; each cell is then explained twice: with that calibration (the
``ratio`` columns) and with the model's built-in constants (``ratio_constants``), from the
same run. The calibration is the benchmark's own: the machine's is not written.
"""

import argparse
import contextlib
import itertools
import json
import statistics
import time
import warnings

from shared import OUT, machine, own_home, testbed_or_skip
import workbench as wb
from workbench.common import rates

FEATURES = 256
MODELS = {"0.3 MB": 0.3e6, "1 MB": 1e6, "4 MB": 4e6}
RATES = ["50mbit", "100mbit", "200mbit"]
BITS = {"fp32": None, "fp16": "fp16", "int8": "int8"}
PER_WORKER = 32  # examples per worker and step
STEADY_S = 8.0  # seconds of steps after the skipped first calls, as predicted


def model_for(model_bytes):
    """An MLP FEATURES-h-10 whose float32 weights and biases take about ``model_bytes``."""
    h = max(1, round((model_bytes / 4 - 10) / (FEATURES + 1 + 10)))
    return wb.models.mlp((h,))


CUTS = {"narrow": (0, 0, 1), "wide": (0, 1, 1)}  # split_mlp((256, 16)): the stage of each layer
SPLIT_BATCH = 64


@contextlib.contextmanager
def calibrated(paths):
    """A home of its own (``own_home``) whose calibration is ``paths``, ``wb.calibrate_links``'
    figures for each path: what ``run.explain()`` and ``wb.predict`` read inside the block."""
    from workbench.store import calibration

    with own_home() as home:
        for name, figures in paths.items():
            calibration.write(name, figures)
        yield home


def explained(run, paths):
    """(``run.explain()`` with ``paths`` as this machine's calibration, the same with the
    model's built-in constants), each from a home of its own."""
    with own_home():
        constants = run.explain()
    with calibrated(paths):
        return run.explain(), constants


def cell(cluster, bed, data, strategy, workers, ps, rate, model_bytes, compression, guess, model=None, paths=None):
    """One run of the grid, explained: a dict of its predicted and measured figures."""
    for host in bed.hosts:
        bed.set_link(host, rate)
    spe = 2  # calls of 2 steps: the first two (tracing) skipped, then many to time
    steps = int(min(300, max(24, 4 + STEADY_S * guess)))
    batch = {"multi_worker_mirrored": PER_WORKER * workers, "model_parallel": SPLIT_BATCH}.get(strategy, PER_WORKER)
    run = cluster.train(model or model_for(model_bytes), data, strategy=strategy, workers=workers, ps=ps,
                        global_batch_size=batch, steps=steps, steps_per_execution=spe, checkpoint_every=0,
                        compression=compression, learning_rate=0.01, seed=0, dashboard=False).wait(timeout=1800)
    e, plain = explained(run, paths or {})
    t = e.table.set_index("figure")
    sent = t[t.index.str.contains("link bytes sent per step")]
    constants = plain.table.set_index("figure").loc["steps/s"]
    return {
        "run": run.id, "global_batch_size": batch,
        "predicted_constants": float(constants.predicted), "ratio_constants": float(constants.ratio),
        "strategy": strategy, "workers": workers, "ps": ps, "rate": rate, "model_bytes": model_bytes,
        "compression": compression or "fp32", "steps": steps,
        "predicted": float(t.loc["steps/s", "predicted"]), "measured": float(t.loc["steps/s", "measured"]),
        "ratio": float(t.loc["steps/s", "ratio"]),
        "bytes_ratios": [float(r) for r in sent.ratio if r == r],
        "bottleneck": e.prediction["bottleneck"], "sentence": e.sentence,
    }


def grid(quick, parts=("ring", "ps", "split"), workers=(2, 3, 4), rates=tuple(RATES), bits=tuple(BITS)):
    """The cells to run: (ring cells, PS cells, split cells), the full grid cut to ``parts``,
    ``workers``, ``rates`` and ``bits`` (the ring's; PS and split cells run fp32, the PS
    cells at 100 Mbit)."""
    ring = list(itertools.product([2, 3, 4], RATES, MODELS, BITS))
    ps = list(itertools.product([1, 2, 3], [1, 2]))
    split = list(itertools.product(RATES, CUTS))
    if quick:
        ring = [(2, "100mbit", "0.3 MB", "fp32"), (3, "100mbit", "0.3 MB", "fp32"), (3, "100mbit", "0.3 MB", "int8")]
        ps, split = [(2, 1)], [("50mbit", "wide")]
    ring = [c for c in ring if "ring" in parts and c[0] in workers and c[1] in rates and c[3] in bits]
    ps = [c for c in ps if "ps" in parts and c[0] in workers and "100mbit" in rates and "fp32" in bits]
    split = [c for c in split if "split" in parts and 2 in workers and c[0] in rates and "fp32" in bits]
    return ring, ps, split


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--parts", nargs="+", choices=("ring", "ps", "split"), default=("ring", "ps", "split"))
    p.add_argument("--workers", nargs="+", type=int, choices=(1, 2, 3, 4), default=(1, 2, 3, 4))
    p.add_argument("--rates", nargs="+", choices=RATES, default=RATES)
    p.add_argument("--bits", nargs="+", choices=list(BITS), default=list(BITS))
    p.add_argument("--out", default="predict", help="the results' file names: OUT.json, OUT.md, OUT.png")
    args = p.parse_args(argv)
    t0 = time.time()
    bed = testbed_or_skip('predict', hosts=6)
    if bed is None:
        return
    ring, ps_cells, split_cells = grid(args.quick, args.parts, args.workers, args.rates, args.bits)
    data = wb.datasets.synthetic(examples=4096, features=FEATURES)
    cells = []
    with bed, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TF's servers on the bed's network: expected here
        with wb.Cluster(**bed.ssh_cluster(1), timeout=180) as cluster:
            for host in bed.hosts:
                bed.set_link(host, None)
            veth = wb.calibrate_links(cluster, save=False)
            print("calibrated:", {k: v for k, v in veth.items() if k != "runs"}, flush=True)
            paths = {"veth": {k: v for k, v in veth.items() if k != "path"}}
            for n, rate, model, bits in ring:
                guess = _guess(n, rate, MODELS[model], bits)  # steps/s from the formula alone: sizes the run
                cells.append(cell(cluster, bed, data, "multi_worker_mirrored", n, 0, rate, MODELS[model],
                                  BITS[bits], guess, paths=paths))
                print(_line(cells[-1]), flush=True)
            for n, k in ps_cells:
                cells.append(cell(cluster, bed, data, "parameter_server", n, k, "100mbit", MODELS["1 MB"], None,
                                  _guess(2, "100mbit", 2 * MODELS["1 MB"], "fp32") * n, paths=paths))
                print(_line(cells[-1]), flush=True)
            for rate, cut in split_cells:
                model = wb.models.split_mlp((256, 16), devices=2, stages=CUTS[cut])
                width = model.cut_widths()[0]
                guess = 1 / (2 * SPLIT_BATCH * width * 4 * 8 / rates.parse_rate(rate) + 0.01)
                cells.append(cell(cluster, bed, data, "model_parallel", 2, 0, rate, 2.0 * SPLIT_BATCH * width * 4,
                                  None, guess, model=model, paths=paths))
                print(_line(cells[-1]), flush=True)
            cross(cluster, cells, paths)
    meta = {"quick": args.quick, "seconds": round(time.time() - t0, 1), "machine": machine(), "calibration": veth}
    summary = summarize(cells)
    OUT.mkdir(exist_ok=True)
    (OUT / f"{args.out}.json").write_text(json.dumps({"meta": meta, "summary": summary, "cells": cells}, indent=1))
    table = markdown(cells, summary, meta)
    (OUT / f"{args.out}.md").write_text(table)
    plot(cells, args.out)
    print(table)


BASES = {("multi_worker_mirrored", 2, 0, "100mbit"), ("parameter_server", 1, 1, "100mbit")}


def cross(cluster, cells, paths):
    """Each cell's steps/s, measured / ``wb.predict``-ed from another cell's run: the ring's
    at 2 workers, the parameter server's at 1 worker and 1 PS task, at 100 Mbit, same model
    and bits (the machinery of walkthrough 12's tables for 50 workers, tested where the bed
    can run the shape): ``cross_predicted`` and ``cross_ratio``, for the cells that have one."""
    def key(c):
        return c["strategy"], c["model_bytes"], c["compression"]

    base = {key(c): c["run"] for c in cells if (c["strategy"], c["workers"], c["ps"], c["rate"]) in BASES}
    runs = {r.id: r for r in cluster.runs}
    with calibrated(paths):
        for c in cells:
            if base.get(key(c)) in (None, c["run"]):
                continue
            p = wb.predict(runs[base[key(c)]], workers=c["workers"], ps=c["ps"], link=c["rate"],
                           global_batch_size=c["global_batch_size"]).prediction
            c["cross_predicted"], c["cross_ratio"] = p["steps_per_s"], c["measured"] / p["steps_per_s"]
            print(f"{_line(c)}; from {base[key(c)]}: {c['cross_ratio']:.2f}", flush=True)


def _guess(n, rate, model_bytes, bits):
    from workbench.common import costmodel, rates

    S = costmodel.message_bytes(model_bytes, {"fp32": 32, "fp16": 16, "int8": 8}[bits])
    moved = costmodel.gather_bytes(S, n) if bits == "int8" else costmodel.ring_bytes(S, n)
    return 1 / (moved * 8 / rates.parse_rate(rate) + 0.01)


def _line(c):
    return (f"{c['strategy']} n={c['workers']} ps={c['ps']} {c['rate']} {c['model_bytes'] / 1e6:g} MB "
            f"{c['compression']}: measured {c['measured']:.3g} / predicted {c['predicted']:.3g} steps/s = "
            f"{c['ratio']:.2f} (built-in constants: {c['ratio_constants']:.2f}); bytes {_span(c['bytes_ratios'])}; "
            f"{c['bottleneck']}")


def _span(values):
    return f"{min(values):.3f}-{max(values):.3f}" if values else "-"


def summarize(cells):
    bound = [c for c in cells if c["bottleneck"].startswith("network")]
    ratios = [c["ratio"] for c in bound]
    data = [r for c in cells for r in c["bytes_ratios"]]
    plain = [c["ratio_constants"] for c in bound]
    crossed = [c["cross_ratio"] for c in cells if "cross_ratio" in c]
    return {
        "constants_median": statistics.median(plain) if plain else None,
        "constants_within_0.8_1.25": sum(0.8 <= r <= 1.25 for r in plain),
        "cells": len(cells), "network_bound": len(bound),
        "steps_ratio_median": statistics.median(ratios) if ratios else None,
        "steps_ratio_min": min(ratios, default=None), "steps_ratio_max": max(ratios, default=None),
        "within_0.8_1.25": sum(0.8 <= r <= 1.25 for r in ratios),
        "bytes_ratio_min": min(data, default=None), "bytes_ratio_max": max(data, default=None),
        "bytes_within_0.95_1.1": sum(0.95 <= r <= 1.1 for r in data), "bytes_cells": len(data),
        "cross_cells": len(crossed), "cross_median": statistics.median(crossed) if crossed else None,
        "cross_min": min(crossed, default=None), "cross_max": max(crossed, default=None),
        "cross_within_0.8_1.25": sum(0.8 <= r <= 1.25 for r in crossed),
    }


def markdown(cells, s, meta):
    def r(v):
        return "-" if v is None else f"{v:.2f}"

    lines = [f"Cost model against the test bed: steps/s measured / predicted, median [min-max] over "
             f"{s['network_bound']} network-bound cells of {s['cells']}: {r(s['steps_ratio_median'])} "
             f"[{r(s['steps_ratio_min'])}-{r(s['steps_ratio_max'])}], {s['within_0.8_1.25']} within 0.8-1.25; "
             f"bytes per link measured / predicted {r(s['bytes_ratio_min'])}-{r(s['bytes_ratio_max'])} "
             f"({s['bytes_within_0.95_1.1']} of {s['bytes_cells']} within 0.95-1.1). With the model's built-in "
             f"constants instead of the calibration: median {r(s['constants_median'])}, "
             f"{s['constants_within_0.8_1.25']} within 0.8-1.25. `wb.predict` from another cell's run (a ring's at "
             f"2 workers, a parameter server's at 1, both at 100 Mbit; same model and bits), {s['cross_cells']} cell(s): "
             f"median {r(s['cross_median'])} [{r(s['cross_min'])}-{r(s['cross_max'])}], "
             f"{s['cross_within_0.8_1.25']} within 0.8-1.25. Machine: {meta['machine']}, {meta['seconds']:.0f} s.",
             "",
             "| strategy | workers | PS | link | model | bits | predicted steps/s | measured | ratio | ratio (constants) "
             "| ratio (wb.predict from another run) | bytes ratio | bottleneck |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in cells:
        model = (f"cut {c['model_bytes'] / 1e3:g} KB/step" if c["strategy"] == "model_parallel"
                 else f"{c['model_bytes'] / 1e6:g} MB")
        lines.append(f"| {c['strategy']} | {c['workers']} | {c['ps']} | {c['rate']} | {model} "
                     f"| {c['compression']} | {c['predicted']:.3g} | {c['measured']:.3g} | {c['ratio']:.2f} "
                     f"| {c['ratio_constants']:.2f} | {r(c.get('cross_ratio'))} | {_span(c['bytes_ratios'])} "
                     f"| {c['bottleneck']} |")
    return "\n".join(lines) + "\n"


NAMES = {"multi_worker_mirrored": "ring", "parameter_server": "parameter server", "model_parallel": "split model"}


def plot(cells, name="predict"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for (strategy, bound), marker in ((("multi_worker_mirrored", True), "o"), (("multi_worker_mirrored", False), "x"),
                                      (("parameter_server", True), "s"), (("parameter_server", False), "+"),
                                      (("model_parallel", True), "^"), (("model_parallel", False), "1")):
        pts = [c for c in cells if c["strategy"] == strategy and c["bottleneck"].startswith("network") == bound]
        if pts:
            ax.scatter([c["predicted"] for c in pts], [c["measured"] for c in pts], marker=marker, s=22,
                       label=f"{NAMES[strategy]}, "
                             f"{'network' if bound else 'not network'}-bound")
    values = [v for c in cells for v in (c["predicted"], c["measured"]) if v > 0]
    lo, hi = min(values) / 1.3, max(values) * 1.3
    for f, style in ((1.0, "-"), (0.8, ":"), (1.25, ":")):
        ax.plot([lo, hi], [lo * f, hi * f], style, color="#888", linewidth=0.8)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="predicted steps/s",
           ylabel="measured steps/s", title="Cost model against the test bed (lines: x1, x0.8, x1.25)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)


if __name__ == "__main__":
    main()
