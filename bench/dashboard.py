"""Cost of the live dashboard: MWMS throughput with the dashboard updating vs without, in
the same run, alternated; and the metrics latency from a step ending on an engine to its
point in the widget's model (same machine, same clock).

    python bench/dashboard.py [--quick]

Results go to bench/results/dashboard.json and .md.
"""

import argparse
import json
import statistics

import workbench as wb

from shared import OUT, machine, steady


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    repeats, steps = (1, 400) if args.quick else (5, 1500)  # quick: still > 1 s, several updates
    digits = wb.datasets.digits()
    on, off, latencies = [], [], []
    with wb.Cluster(engines=2) as cluster:
        for _ in range(repeats):
            for with_dashboard in (False, True):
                run = cluster.train(wb.models.mlp((64, 32)), digits, strategy="multi_worker_mirrored", workers=2,
                                    global_batch_size=128, steps=steps, checkpoint_every=0, dashboard=False)
                if with_dashboard:
                    dash = run.dashboard(interval=0.25)
                run.wait()
                if with_dashboard:
                    dash._thread.join(10)
                    latencies += dash.latencies[:-1]  # the last update comes after the run ended
                (on if with_dashboard else off).append(steady(run))
    result = {
        "steps_per_s_with_dashboard": on, "steps_per_s_without": off,
        "ratio_median": statistics.median(on) / statistics.median(off),
        "latency_s_median": statistics.median(latencies) if latencies else None,
        "latency_s_p90": sorted(latencies)[int(0.9 * (len(latencies) - 1))] if latencies else None,
        "latency_samples": len(latencies),
        "meta": {"repeats": repeats, "steps": steps, "quick": args.quick, "machine": machine()},
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "dashboard.json").write_text(json.dumps(result, indent=1))
    md = (f"MWMS x2, digits MLP, batch 128, {repeats} alternated pairs of {steps} steps; machine: {result['meta']['machine']}\n\n"
          f"| figure | value | target |\n| --- | --- | --- |\n"
          f"| steps/s with dashboard / without (median) | {result['ratio_median']:.3f} "
          f"({statistics.median(on):.0f} / {statistics.median(off):.0f}) | >= 0.98 |\n"
          f"| metrics latency, engine step end -> widget model, median | {_s(result['latency_s_median'])} "
          f"(p90 {_s(result['latency_s_p90'])}, {len(latencies)} updates) | <= 0.5 s |\n")
    (OUT / "dashboard.md").write_text(md)
    print(md)


def _s(seconds):
    return "n/a" if seconds is None else f"{seconds:.3f} s"


if __name__ == "__main__":
    main()
