"""The workbench against the peer: plain tf.distribute scripts as TF's tutorials write them
(bench/peer_task.py), same model, data, global batch and topology, launched by hand with
TF_CONFIG. Every figure is a ratio of two things measured in this run, alternated.

    python bench/versus_peer.py           # full: ~17 minutes on 2 cores
    python bench/versus_peer.py --quick   # smoke: a few steps each, digits only, no looped peer

- MWMS, 2 workers, dashboard on: workbench steps/s over the peer's; over TF's best loop,
  as whole runs alternated and, closer, as bursts alternated on one cluster and one peer
  job kept running (``closely_alternated``);
- PSS, 1 PS + 2 workers: workbench defaults over the tutorial's one step per schedule
  (the wide MLP at 300 steps, which the workbench runs looped, and at 2,000, unrolled);
  as a reference, the tutorial's step looped 10 times per schedule (``tf.range``) over
  the tutorial's one, alternated in the same repetitions;
- memory: each engine's resident set after training, by role;
- cold start, ``Cluster(...)`` to the first finished step (2 workers + 1 PS), against the
  peer's process launch to its first step; re-run of the same topology in a live cluster;
  a different topology (engine recycle).

Results go to bench/results/versus_peer.json and .md.
"""

import argparse
import json
import sys
import time

import peer

from shared import OUT, steady, summary
import workbench as wb  # noqa: E402
from workbench.common import figures  # noqa: E402

PEER_LOOPED = "peer with 10 steps per schedule (tf.range) / peer"
PEER_BEST_MWMS = "workbench / peer at TF's best loop (10 steps per call in tf.range, one reduce per call)"
BEST_BURSTS = "workbench / TF's best loop, closely alternated (bursts on one cluster and one running peer job)"
BURSTS = {"digits": (20, 1000), "wide": (12, 200)}  # (pairs, steps per burst); --quick: 2 pairs of QUICK_STEPS
# --quick's runs: long enough for figures.py to time (a parameter-server run of 40 steps held
# 2 distinct step ends: timed between them it read 10,090 steps/s, x46 the peer's)
QUICK_STEPS = 200


def closely_alternated(cluster, model, data, batch, workload, pairs, steps):
    """MWMS (dashboard on) against TF's best loop, alternated burst by burst: a workbench
    run of ``steps`` on the live cluster, then as many steps of one peer job kept running
    between bursts (``peer.Bursts``), ``pairs`` times, each side first in every other pair;
    both timed over their last 80% of steps. Whole runs alternated pay a cluster
    start or a process launch between the two sides and drift with the machine's load
    over minutes; bursts seconds apart see the same machine. Ratios of the pairs."""
    ratios, ours, theirs = [], [], []

    def workbench():
        run = cluster.train(model, data, strategy="multi_worker_mirrored", workers=2, global_batch_size=batch,
                            steps=steps, checkpoint_every=0, dashboard=False)
        run.dashboard()
        run.wait()
        ours.append(steady(run))

    with peer.Bursts(workload, warmup=max(steps, 100), per_call=10) as best:
        def best_loop():
            theirs.append(best.steps_per_s(steps))

        for i in range(pairs):  # each side first in every other pair
            for side in ((workbench, best_loop) if i % 2 == 0 else (best_loop, workbench)):
                side()
            ratios.append(ours[-1] / theirs[-1])
    return {"ratio": summary(ratios), "workbench steps/s": summary(ours), "peer steps/s": summary(theirs),
            "pairs": pairs, "steps": steps}


def workloads():
    return {
        "digits": (wb.models.mlp((64, 32)), wb.datasets.from_numpy(*_digits(), test_fraction=0.01), 128),
        "wide": (wb.models.mlp((512,)), wb.datasets.synthetic(examples=4096, features=784), 512),
    }


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype("float32"), d.target


def first_step(run, t0, timeout=300):
    end = time.monotonic() + timeout
    while run.step < 1:
        if time.monotonic() > end or run.done:
            raise RuntimeError(f"no first step: {run}")
        time.sleep(0.01)
    return float(run.history.time.min()) - t0


def _rss():
    import psutil

    return psutil.Process().memory_info().rss


def rss(cluster, run):
    """Resident memory of each task's engine after the run, in MB."""
    return {t.name: round(cluster.client[t.engine_id].apply_sync(_rss) / 1e6)
            for t in run.tasks}


def ratio_text(q):
    """A ratio's median [min-max], or what it is when a run was too short to measure."""
    return figures.TOO_SHORT if q["median"] != q["median"] else f"x{q['median']:.2f} [{q['min']:.2f}-{q['max']:.2f}]"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=None)
    args = p.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    # digits runs 3000 steps: parameter-server runs of 1000 steps or more unroll their calls;
    # the wide MLP runs 300 steps (looped) and, PSS only, 2000 (unrolled)
    steps = {"digits": QUICK_STEPS if args.quick else 3000, "wide": 300, "wide_2000": 2000}
    results, t_all = {}, time.time()

    # cold start: the peer's processes against a fresh Cluster, both to the first finished step.
    # --quick: that cluster trains the digits rows too, and the peer's PSS run there gives the
    # peer's cold start (a cluster start and a peer launch less)
    cold_wb, cold_peer, rerun, recycle = [], [], [], []
    kept = None
    for _ in range(repeats):
        model, data, batch = workloads()["digits"]
        pss = dict(strategy="parameter_server", workers=2, ps=1, global_batch_size=batch, steps=50,
                   checkpoint_every=0, dashboard=False)
        t0 = time.time()
        cluster = wb.Cluster(engines=4).start()
        try:
            run = cluster.train(model, data, **pss)
            cold_wb.append(first_step(run, t0))
            run.wait()
            t0 = time.time()
            again = cluster.train(model, data, **pss)
            rerun.append(first_step(again, t0))
            again.wait()
            t0 = time.time()
            other = cluster.train(model, data, **dict(pss, strategy="multi_worker_mirrored", ps=0))
            recycle.append(first_step(other, t0))
            other.wait()
        except BaseException:
            cluster.stop()
            raise
        if args.quick:
            kept = cluster
            continue
        cluster.stop()
        r = peer.run("pss", "digits", 50)
        cold_peer.append(r["first_step"] - r["launched"])

    mwms = ("MWMS 2 workers (dashboard on)", "mwms", dict(strategy="multi_worker_mirrored", workers=2))
    pss = ("PSS 1 PS + 2 workers (workbench defaults vs 1 step/schedule)", "pss",
           dict(strategy="parameter_server", workers=2, ps=1))
    plans = [("digits", "digits", [mwms, pss])] + ([] if args.quick else [
        ("wide", "wide", [mwms, pss]), ("wide_2000", "wide", [pss])])
    for wname, workload, runs in plans:
        model, data, batch = workloads()[workload]
        rows = {}
        cluster = kept if kept is not None else wb.Cluster(engines=4).start()
        kept = None  # the cold-start cluster serves the first workload only
        try:
            for label, kind, options in runs:
                ours, theirs, ratios, looped = [], [], [], []
                for _ in range(repeats):  # alternated: workbench, peer, workbench, peer, ...
                    run = cluster.train(model, data, global_batch_size=batch, steps=steps[wname],
                                        checkpoint_every=0, dashboard=False, **options)
                    if kind == "mwms":
                        run.dashboard()  # the widget and its 4 Hz update thread, as in a notebook
                    run.wait()
                    ours.append(steady(run))
                    r = peer.run(kind, workload, steps[wname])
                    theirs.append(r["steps_per_s"])
                    if kind == "pss" and len(cold_peer) < len(cold_wb):  # --quick: the peer's cold start
                        cold_peer.append(r["first_step"] - r["launched"])
                    ratios.append(ours[-1] / theirs[-1])
                    if args.quick:  # no looped peer in the smoke run: two process launches less (~90 s of the
                        continue    # suite); TF's best MWMS loop still runs there, in the closely alternated bursts
                    if kind == "pss":  # TF's own answer: the tutorial's step looped 10 times per schedule
                        looped.append(peer.run(kind, workload, steps[wname], per_schedule=10)["steps_per_s"]
                                      / theirs[-1])
                    else:  # TF's best loop for MWMS: 10 steps per call in tf.range, one reduce per call
                        looped.append(ours[-1] / peer.run(kind, workload, steps[wname], per_schedule=10)["steps_per_s"])
                rows[label] = {"workbench steps/s": summary(ours), "peer steps/s": summary(theirs),
                               "ratio": summary(ratios), "engine RSS after training (MB)": rss(cluster, run)}
                if looped:
                    rows[label][PEER_LOOPED if kind == "pss" else PEER_BEST_MWMS] = summary(looped)
                if kind == "mwms":
                    pairs, n = (2, QUICK_STEPS) if args.quick else BURSTS[workload]
                    rows[label][BEST_BURSTS] = closely_alternated(cluster, model, data, batch, workload, pairs, n)
        finally:
            cluster.stop()
        results[wname] = rows
        print(wname, json.dumps({k: round(v["ratio"]["median"], 2) for k, v in rows.items()}), flush=True)

    results["start"] = {
        "workbench cold start, Cluster(engines=4) -> first step (s)": summary(cold_wb),
        "peer cold start, process launch -> first step (s)": summary(cold_peer),
        "workbench re-run, same topology, live cluster (s)": summary(rerun),
        "workbench different topology (recycle) (s)": summary(recycle),
    }

    meta = {"quick": args.quick, "repeats": repeats, "seconds": round(time.time() - t_all, 1),
            "cpus": __import__("os").cpu_count(), "python": sys.version.split()[0]}
    OUT.mkdir(exist_ok=True)
    (OUT / "versus_peer.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    workloads_run = [w for w in results if w != "start"]  # in the order they ran
    lines = ["| figure | median [min-max] |", "| --- | --- |"]
    for name, s in results["start"].items():
        lines.append(f"| {name} | {s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}] |")
    for wname in workloads_run:
        for label, r in results[wname].items():
            q = r["ratio"]
            lines.append(f"| {wname}: {label}, workbench / peer | {ratio_text(q)} "
                         f"({r['workbench steps/s']['median']:.0f} vs {r['peer steps/s']['median']:.0f} steps/s) |")
            if PEER_BEST_MWMS in r:
                q = r[PEER_BEST_MWMS]
                lines.append(f"| {wname}: {label}, {PEER_BEST_MWMS} | {ratio_text(q)} |")
            if BEST_BURSTS in r:
                b = r[BEST_BURSTS]
                q = b["ratio"]
                lines.append(f"| {wname}: {label}, {BEST_BURSTS}, {b['pairs']} pairs of {b['steps']} steps | "
                             f"{ratio_text(q)} "
                             f"({b['workbench steps/s']['median']:.0f} vs {b['peer steps/s']['median']:.0f} steps/s) |")
            if PEER_LOOPED in r:
                q = r[PEER_LOOPED]
                lines.append(f"| {wname}: {label}, reference: {PEER_LOOPED} | {ratio_text(q)} |")
    for wname in workloads_run:
        for label, r in results[wname].items():
            memory = ", ".join(f"{k} {v}" for k, v in r["engine RSS after training (MB)"].items())
            lines.append(f"| {wname}: {label}, engine RSS after training (MB) | {memory} |")
    (OUT / "versus_peer.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
