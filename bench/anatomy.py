"""Inside a step: what the step anatomy costs, and what compressing the all-reduce buys.

    python bench/anatomy.py [--quick]

1. Overhead: MWMS x2, digits MLP, steps/s with ``anatomy=True`` / ``anatomy=False``, runs
   alternated on the same engines (target >= 0.97).
2. Effective all-reduce bandwidth per compression, MWMS x2 on a wide MLP (784-2048-10,
   6.5 MB of float32 gradients): useful bytes (the float32 gradients' size) per second of
   all-reduce transfer (the anatomy's communication: the all-reduce time of the worker
   that arrived last, so waiting for a peer is left out), each compression against 32-bit
   in the same alternation (target fp16 >= x1.8). The bytes each one hands to the
   collective are printed beside it. The anatomy's communication leaves out compression's
   casts and quantizing (timed apart and counted as compute since 2026-11-26): this is
   the collective's own rate.

Results go to bench/results/anatomy.json and .md.
"""

import argparse
import json
import statistics

import workbench as wb
from workbench.common import anatomy

from shared import OUT, machine, steady

KINDS = (None, "fp16", "bf16", "int8")


def transfer_s(run):
    """Median seconds per step of all-reduce transfer (after the first 20% of steps)."""
    h = run.history
    h = h[h.step > h.step.max() * 0.2]
    return float(anatomy.per_step(h).groupby("step").communication.first().median())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    repeats, steps, wide_steps = (1, 150, 20) if args.quick else (5, 1500, 200)
    digits = wb.datasets.digits()
    wide = wb.datasets.synthetic(examples=4096)
    on, off = [], []
    bandwidth = {str(k): [] for k in KINDS}
    sent = {}
    with wb.Cluster(engines=2) as cluster:
        for _ in range(repeats):
            for timed in (False, True):
                run = cluster.train(wb.models.mlp((64, 32)), digits, strategy="multi_worker_mirrored", workers=2,
                                    global_batch_size=128, steps=steps, checkpoint_every=0, dashboard=False,
                                    anatomy=timed).wait()
                (on if timed else off).append(steady(run))
            for kind in KINDS:
                run = cluster.train(wb.models.mlp((2048,)), wide, strategy="multi_worker_mirrored", workers=2,
                                    global_batch_size=128, steps=wide_steps, checkpoint_every=0,
                                    dashboard=False, compression=kind).wait()
                useful = (784 * 2048 + 2048 + 2048 * 10 + 10) * 4
                bandwidth[str(kind)].append(useful / transfer_s(run))
                sent[str(kind)] = int(run.history.comm_bytes.iloc[-1])
    base = statistics.median(bandwidth["None"])
    result = {
        "steps_per_s_anatomy_on": on, "steps_per_s_anatomy_off": off,
        "overhead_ratio_median": statistics.median(on) / statistics.median(off),
        "useful_bytes_per_s": bandwidth, "bytes_sent_per_step": sent,
        "bandwidth_vs_32bit": {k: statistics.median(v) / base for k, v in bandwidth.items()},
        "meta": {"repeats": repeats, "steps": steps, "wide_steps": wide_steps, "quick": args.quick,
                 "machine": machine()},
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "anatomy.json").write_text(json.dumps(result, indent=1))
    md = (f"MWMS x2; {repeats} alternated repeats; machine: {result['meta']['machine']}\n\n"
          f"| figure | value | target |\n| --- | --- | --- |\n"
          f"| steps/s anatomy on / off (digits MLP, batch 128, {steps} steps, median) | "
          f"{result['overhead_ratio_median']:.3f} ({statistics.median(on):.0f} / {statistics.median(off):.0f}) "
          f"| >= 0.97 |\n")
    for k in KINDS:
        r = result["bandwidth_vs_32bit"][str(k)]
        md += (f"| {k or 'float32'}: useful gradient bytes/s vs 32-bit (784-2048-10, {sent[str(k)]:,} B sent/step) | "
               f"x{r:.2f} ({statistics.median(bandwidth[str(k)]) / 1e6:.0f} MB/s) | "
               f"{'>= x1.8' if k == 'fp16' else ''} |\n")
    (OUT / "anatomy.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
