"""Steps/s of every strategy on one live cluster, as ratios against the `single` baseline
measured in the same run, and the PS speed-up from several steps per scheduled function.

    python bench/strategies.py            # full: ~3 minutes on 2 cores
    python bench/strategies.py --quick    # smoke: a few steps each

Each configuration runs ``--repeats`` times, alternating with the others, and reports the
median and range of steady-state steps/s (the first fifth of a run, tracing and warm-up,
is left out). Results go to bench/results/strategies.json and .md.
"""

import argparse
import json
import statistics
import time

from shared import OUT, machine, steady
import workbench as wb


CONFIGS = {
    "single": dict(strategy="single", workers=1, ps=0),
    "mirrored (2 logical CPUs)": dict(strategy="mirrored", workers=1, ps=0, devices=2),
    "multi_worker_mirrored x2": dict(strategy="multi_worker_mirrored", workers=2, ps=0),
    "parameter_server 1ps+2w, 10 steps/schedule": dict(strategy="parameter_server", workers=2, ps=1, steps_per_execution=10),
    "parameter_server 1ps+2w, 1 step/schedule": dict(strategy="parameter_server", workers=2, ps=1, steps_per_execution=1),
}


def workloads(quick):
    digits = wb.datasets.digits()
    wide = wb.datasets.synthetic(examples=4096, features=784, classes=10)
    if quick:  # smoke (tests/test_bench.py): one workload, a few steps
        return {"digits MLP 64-64-32-10, batch 128": (wb.models.mlp((64, 32)), digits, 128, 30)}
    return {
        "digits MLP 64-64-32-10, batch 128": (wb.models.mlp((64, 32)), digits, 128, 600),
        "wide MLP 784-512-10, batch 512": (wb.models.mlp((512,)), wide, 512, 200),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=None)
    args = p.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    results = {}
    t0 = time.time()
    with wb.Cluster(engines=4) as cluster:
        for wname, (model, data, batch, steps) in workloads(args.quick).items():
            samples = {c: [] for c in CONFIGS}
            for _ in range(repeats):
                for cname, cfg in CONFIGS.items():  # alternate configurations within each repeat
                    run = cluster.train(model, data, global_batch_size=batch, steps=steps, checkpoint_every=0,
                                        learning_rate=0.05, **cfg).wait(timeout=900)
                    samples[cname].append(steady(run))
            base = statistics.median(samples["single"])
            results[wname] = {
                c: {"steps_per_s_median": statistics.median(v), "min": min(v), "max": max(v),
                    "vs_single": statistics.median(v) / base, "samples": v}
                for c, v in samples.items()
            }
            ps10 = statistics.median(samples["parameter_server 1ps+2w, 10 steps/schedule"])
            ps1 = statistics.median(samples["parameter_server 1ps+2w, 1 step/schedule"])
            results[wname]["ps_speedup_10_vs_1_steps_per_schedule"] = ps10 / ps1
    meta = {"repeats": repeats, "quick": args.quick, "seconds": round(time.time() - t0, 1),
            "machine": machine()}
    OUT.mkdir(exist_ok=True)
    (OUT / "strategies.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    table = _markdown(results, meta)
    (OUT / "strategies.md").write_text(table)
    print(table)


def _markdown(results, meta):
    lines = [f"Steps/s, median [min-max] of {meta['repeats']} runs; machine: {meta['machine']}", ""]
    for wname, rows in results.items():
        lines += [f"**{wname}**", "", "| configuration | steps/s | vs single |", "| --- | --- | --- |"]
        for c, r in rows.items():
            if isinstance(r, dict):
                lines.append(f"| {c} | {r['steps_per_s_median']:.0f} [{r['min']:.0f}-{r['max']:.0f}] | x{r['vs_single']:.2f} |")
        lines += ["", f"PS speed-up, 10 vs 1 steps per scheduled function: x{rows['ps_speedup_10_vs_1_steps_per_schedule']:.2f}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
