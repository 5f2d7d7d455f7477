"""The same MWMS run across 2 emulated hosts on unshaped, 1 Gbit and 100 Mbit links:
steps/s and the bytes each host sent a step (from its link's counters), as ratios against
the unshaped baseline measured in the same run.

    python bench/network.py            # full: ~3 minutes on 2 cores (needs root: wb.testbed)
    python bench/network.py --quick    # smoke: a few steps each

One bed (2 hosts), one SSH engine per host, one cluster; the links are re-shaped between
runs (``bed.set_link``) and the configurations alternate within each repeat. The model,
an MLP 64-2048-256-10 (0.66 M parameters, 2.6 MB of float32 gradients), is all-reduce
heavy and compute light. The all-reduce's bus bandwidth (TF's ring, 2 workers: each
sends one model's bytes a step) is set against the link rate. Latency and loss are not
emulated (no netem here). Results go to bench/results/network.json and .md.
"""

import argparse
import json
import statistics
import time
import warnings

from shared import OUT, machine, testbed_or_skip
import workbench as wb
from workbench.common import figures

RATES = {"unshaped": None, "1 Gbit": "1gbit", "100 Mbit": "100mbit"}


def measure(run):
    """(steady steps/s, median bytes a step each host sent) of a finished run. Steps/s is
    the run's own figure (``workbench.common.figures``: after its first fifth of steps,
    from the end of the chunk holding that step, so a chunk's earlier steps are not
    counted); the bytes are the links' counters over exactly the same seconds."""
    import numpy as np

    first, began, last, ended = figures.steady_stretch(run.history)
    if not ended > began:  # NaN or no time: too few chunks to time
        raise ValueError(f"run {run.id}: fewer than two chunks of steps to time ({last} steps)")
    sent = [np.interp(ended, s.time, s.sent) - np.interp(began, s.time, s.sent)
            for _, s in run.links.frame().groupby("host")]
    return (last - first) / (ended - began), statistics.median(sent) / (last - first)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=None)
    args = p.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 2)
    t0 = time.time()
    bed = testbed_or_skip('network', hosts=2)
    if bed is None:
        return
    model = wb.models.mlp((2048, 256))
    data = wb.datasets.digits()
    steps = {"unshaped": 200, "1 Gbit": 150, "100 Mbit": 40}
    if args.quick:
        steps = {k: max(v // 5, 25) for k, v in steps.items()}  # >= 3 chunks of 10: two ends to time
    samples = {name: [] for name in RATES}
    with bed, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TF's servers on the bed's network: expected here
        with wb.Cluster(**bed.ssh_cluster(1), timeout=180) as cluster:
            for _ in range(repeats):
                for name, rate in RATES.items():
                    for host in bed.hosts:
                        bed.set_link(host, rate)
                    run = cluster.train(model, data, strategy="multi_worker_mirrored", workers=2,
                                        global_batch_size=64, steps=steps[name], checkpoint_every=0,
                                        learning_rate=0.05, seed=0, dashboard=False).wait(timeout=900)
                    samples[name].append(measure(run))
            variables = run.placement[run.placement.kind == "model"]
            model_bytes = int(variables[variables.task == 0].bytes.sum())
    base = statistics.median(s for s, _ in samples["unshaped"])
    results = {}
    for name, rate in RATES.items():
        sps = [s for s, _ in samples[name]]
        sent = statistics.median(b for _, b in samples[name])
        link_bits = None if rate is None else _bits(rate)
        results[name] = {
            "steps_per_s_median": statistics.median(sps), "min": min(sps), "max": max(sps), "samples": sps,
            "vs_unshaped": statistics.median(sps) / base,
            "bytes_sent_per_step": sent, "bytes_per_step_over_model": sent / model_bytes,
            # ring all-reduce of 2: bus bandwidth = the model's bytes per step x steps/s
            "bus_bandwidth_bits": model_bytes * 8 * statistics.median(sps),
            "bus_bandwidth_over_link": None if link_bits is None else model_bytes * 8 * statistics.median(sps) / link_bits,
        }
    meta = {"repeats": repeats, "quick": args.quick, "seconds": round(time.time() - t0, 1),
            "model_bytes": model_bytes, "machine": machine()}
    OUT.mkdir(exist_ok=True)
    (OUT / "network.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    table = _markdown(results, meta)
    (OUT / "network.md").write_text(table)
    print(table)


def _bits(rate):
    from workbench.kernel.testbed import links

    return links.parse_rate(rate)


def _markdown(results, meta):
    lines = [f"MWMS, 2 workers on 2 emulated hosts, MLP 64-2048-256-10 ({meta['model_bytes']:,} B of gradients), "
             f"batch 64; median [min-max] of {meta['repeats']} runs; machine: {meta['machine']}", "",
             "| links | steps/s | vs unshaped | bytes sent / step / host | / model bytes | bus bandwidth | / link rate |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in results.items():
        over = "-" if r["bus_bandwidth_over_link"] is None else f"{r['bus_bandwidth_over_link']:.2f}"
        lines.append(f"| {name} | {r['steps_per_s_median']:.1f} [{r['min']:.1f}-{r['max']:.1f}] | x{r['vs_unshaped']:.2f} "
                     f"| {r['bytes_sent_per_step']:,.0f} | {r['bytes_per_step_over_model']:.2f} "
                     f"| {r['bus_bandwidth_bits'] / 1e6:,.0f} Mbit/s | {over} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
