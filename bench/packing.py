"""The all-reduce's message latency on this machine, and the cost model's time for it.

    python bench/packing.py [--quick]

Two local workers (MWMS), one machine's loopback:

1. Packing (``bytes_per_pack``, TF's ``CommunicationOptions``): an MLP of 16 tensors
   all-reduced in 1 pack, in 16 (a pack a tensor) and in the 4 packs the model counts for
   ``bytes_per_pack=5000``, alternated. The first two measure the latency alpha of one
   message (the anatomy's communication grows by 30 messages); with it, the model's
   communication for 4 packs (6 more messages than 1) against the third run's measured
   one (target 0.75-1.5: the band also passes 3 or 5 packs).
2. ``wb.calibrate_links``: alpha and the CPU per byte measured on the loopback, then a 1 MB
   ring's communication measured against ``run.explain()``'s prediction from them (target
   0.5-2: the machine's other work moves both). The calibration is the benchmark's own, in
   a home of its own: the machine's is not written.

Results: bench/results/packing.json and .md. Moved here from tests/test_explain.py, whose
tests keep the pack counts and the model's arithmetic: a timing band is a benchmark's.
"""

import argparse
import json
import statistics
import time

import workbench as wb
from workbench.common import costmodel
from workbench.kernel.runs import explain

from shared import OUT, machine, own_home

PACKINGS = (0, 1, 5000)


def communication(run):
    """The anatomy's communication per step (s), as ``run.explain()`` measures it."""
    return run.explain().table.set_index("figure").loc["communication per step (ms)", "measured"] / 1e3


def packing(cluster, data, steps):
    """One alternation of the three packings: (alpha s a message, 4 packs measured / predicted)."""
    model = wb.models.mlp((32,) * 7)  # 8 layers: 16 tensors
    comm = {}
    for per_pack in PACKINGS:
        run = cluster.train(model, data, workers=2, steps=steps, global_batch_size=64, checkpoint_every=0,
                            bytes_per_pack=per_pack, dashboard=False).wait(timeout=600)
        assert costmodel.packs(explain.tensor_bytes(run.placement), per_pack) == {0: 1, 1: 16, 5000: 4}[per_pack]
        comm[per_pack] = communication(run)
    alpha = (comm[1] - comm[0]) / (15 * 2)
    predicted = comm[0] + 3 * 2 * alpha
    return alpha, comm[5000] / predicted


def calibrated(cluster, data, steps):
    """(the calibration's figures, a 1 MB ring's communication measured / predicted from them)."""
    from workbench.store import calibration

    with own_home():
        c = wb.calibrate_links(cluster, steps=steps)
        assert calibration.read()["loopback"]["alpha_s"] == c["alpha_s"]
        run = cluster.train(wb.models.mlp((3300,)), data, strategy="multi_worker_mirrored", workers=2,
                            steps=steps, global_batch_size=32, steps_per_execution=5, checkpoint_every=0,
                            dashboard=False, logs=False).wait(timeout=600)
        ratio = float(run.explain().table.set_index("figure").loc["communication per step (ms)", "ratio"])
    return {k: v for k, v in c.items() if k != "runs"}, ratio


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    repeats, steps = (1, 60) if args.quick else (4, 200)
    t0 = time.time()
    data = wb.datasets.digits()
    alphas, packed, rings, calibrations = [], [], [], []
    with wb.Cluster(engines=2) as cluster:
        for _ in range(repeats):
            alpha, ratio = packing(cluster, data, steps)
            alphas.append(alpha)
            packed.append(ratio)
            c, ring = calibrated(cluster, data, 40)
            calibrations.append(c)
            rings.append(ring)
            print(f"alpha {alpha * 1e3:.2f} ms; 4 packs measured / predicted {ratio:.2f}; calibrated alpha "
                  f"{c['alpha_s'] * 1e3:.2f} ms, 1 MB ring's communication measured / predicted {ring:.2f}", flush=True)
    result = {"alpha_s": alphas, "packs_ratio": packed, "calibrations": calibrations, "ring_ratio": rings,
              "packs_ratio_median": statistics.median(packed), "ring_ratio_median": statistics.median(rings),
              "meta": {"quick": args.quick, "repeats": repeats, "steps": steps, "machine": machine(),
                       "seconds": round(time.time() - t0, 1)}}
    OUT.mkdir(exist_ok=True)
    (OUT / "packing.json").write_text(json.dumps(result, indent=1))
    span = lambda v: f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"  # noqa: E731
    md = (f"MWMS x2 on one machine's loopback; {repeats} alternated repeats of {steps} steps; machine: "
          f"{machine()}; {result['meta']['seconds']} s\n\n| figure | median [min-max] | target |\n| --- | --- | --- |\n"
          f"| alpha a message (ms), from 16 packs against 1 | {span([a * 1e3 for a in alphas])} | |\n"
          f"| 4 packs: communication measured / predicted from that alpha | {span(packed)} | 0.75-1.5 |\n"
          f"| calibrated loopback: a 1 MB ring's communication measured / predicted | {span(rings)} | 0.5-2 |\n")
    (OUT / "packing.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
