"""09: the network is the bottleneck (emulated hosts with shaped links; needs root)."""

from make_notebooks import code, md

NAME = "09_network_bottleneck"


def cells():
    return [
        md("""
# The network is the bottleneck

In distributed training the links between machines, not the processors, usually decide
the speed: what is split, and how the machines are connected (a parameter server's
star or an all-reduce ring, synchronous or not), sets how many bytes cross which link on
every step. On one machine's loopback there is no link to fill, so this walkthrough makes
hosts that have one: `wb.testbed` (walkthrough 08) gives each emulated host a link whose
bandwidth `tc` sets (`link="100mbit"`, `bed.set_link(host, rate)`), and every run across
the hosts reads each link's byte counters into `run.history`:
`link_tx_bytes_<host>` / `link_rx_bytes_<host>` (bytes the host sent / received a step)
and `link_util_<host>` (the busier direction over the set rate).

Only bandwidth is emulated: this kernel has no `netem`, so there is no added latency and
no random loss. The bed needs root and Debian's `openssh-server`; without them the first
cell says what is missing and the rest is skipped. Every check below is a ratio or a band
measured in this run, not a time on some other machine; the few numbers the text quotes
from elsewhere say where they were measured (an earlier execution, a test, a benchmark).
"""),
        code("""
import warnings

import workbench as wb
from workbench.common.rates import parse_rate

try:
    bed = wb.testbed(hosts=6, link="1gbit")
except wb.TestbedError as e:
    bed = None
    print("No emulated hosts here:", e)
else:
    print("hosts:", list(bed.hosts), "| links:", {h: "1gbit" for h in bed.links})
"""),
        code("""
if bed is not None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TF's servers on the bed's network: expected
        cluster = wb.Cluster(**bed.ssh_cluster(1), timeout=180).start()
    cluster.engines[["host", "address"]]
""", volatile=True),
        md("""
## All-reduce: a ring uses every link's bandwidth

Two MultiWorkerMirroredStrategy workers on two hosts, a model with 0.66 M parameters
(an MLP 64-2048-256-10: 2.6 MB of float32 gradients) and almost no compute. TF's ring
all-reduce of 2 sends each worker's half of the gradients and then half of the sum: every
step each host sends (and receives) one model's bytes. Its *bus bandwidth*, model bytes
x 8 x steps/s, can at best equal the link rate.

Each run below is measured twice over the same steps, those its dashboard and
`wb.compare` time (after the first fifth of its steps, counted between the ends of
chunks: a chunk of 10 steps, one `tf.function` call, reports them all at its end).
`bus_over_link` comes from its steps/s, `link_use` from the links' byte counters: the
busier direction's bits/s over the set rate. Both are the median over the run's calls,
each call's steps or bytes over its own seconds, so that a call slowed by the machine's
other work (a full test run beside this notebook) does not decide them; the dashboard's
figure, over the whole stretch, is `figure_steps_per_s`. `sent_over_model` is the bytes
each host sent per step over the whole stretch, over the model's bytes.
"""),
        code("""
import numpy as np

from workbench.common.figures import history_figures, steady_stretch, step_ends

BIG = wb.models.mlp((2048, 256))


def speed(run):
    \"\"\"The run's steps/s: the dashboard's figure, after the first fifth of its steps.\"\"\"
    return history_figures(run.history, run.job.global_batch_size)["steps_per_s"]


def stretch(run, whole=False):
    \"\"\"(steps, seconds, {host: (bytes sent, bytes received)}) over the stretch the run's
    steps/s counts (``whole``: from the end of its first step to its last), the bytes from
    each link's counters over exactly that time.\"\"\"
    if whole:
        steps, ends = step_ends(run.history.step, run.history.time)
        first, began, last, ended = steps[0], ends[0], steps[-1], ends[-1]
    else:
        first, began, last, ended = steady_stretch(run.history)
    moved = {}
    for host, s in run.links.frame().groupby("host"):
        sent, received = (np.interp([began, ended], s.time, s[col]) for col in ("sent", "received"))
        moved[host] = (sent[1] - sent[0], received[1] - received[0])
    return last - first, ended - began, moved


def per_call(run, hosts):
    \"\"\"(steps/s, the busiest link's use): each the median over the run's calls inside the
    stretch its figures count, a call's steps (or its link's busier direction's bits) over
    the seconds from the previous call's end to its own.\"\"\"
    first, began, last, ended = steady_stretch(run.history)
    steps, ends = step_ends(run.history.step, run.history.time)
    spe = run.job.steps_per_execution  # a call's last step (its rows are stamped one by one)
    call = (steps % spe == 0) | (steps == steps.max())
    keep = call & (ends >= began) & (ends <= ended)
    steps, ends = steps[keep], ends[keep]
    seconds = np.diff(ends)
    use = []
    for host, s in run.links.frame().groupby("host"):
        if host in hosts:
            busier = np.maximum(*(np.diff(np.interp(ends, s.time, s[col])) for col in ("sent", "received")))
            use.append(float(np.median(busier * 8 / seconds / bed.links[host])))
    return float(np.median(np.diff(steps) / seconds)), max(use)


def allreduce(rate, steps, model=BIG, slow=None, compression=None, workers=2, batch=32):
    for host in bed.hosts:
        bed.set_link(host, rate)
    run = cluster.train(model, wb.datasets.digits(), strategy="multi_worker_mirrored", workers=workers,
                        global_batch_size=batch * workers, steps=steps, checkpoint_every=0, seed=0, dashboard=False,
                        compression=compression)
    if slow is not None:  # one worker's host on a slow link, as soon as the tasks are placed
        bed.set_link(next(t.host for t in run.tasks if t.name == slow), "20mbit")
    run.wait()
    variables = run.placement[run.placement.kind == "model"]
    model_bytes = int(variables[variables.task == 0].bytes.sum())
    n, seconds, moved = stretch(run)
    hosts = [t.host for t in run.tasks]
    sent = np.mean([moved[x][0] for x in hosts]) / n
    steps_per_s, use = per_call(run, hosts)
    return dict(model_bytes=model_bytes, steps_per_s=steps_per_s, figure_steps_per_s=speed(run),
                sent_over_model=sent / model_bytes, bus_over_link=model_bytes * 8 * steps_per_s / parse_rate(rate),
                link_use=use, run=run, predicted=run.explain().prediction["steps_per_s"])


def show(name, r):
    print(name, {k: round(float(v), 3) for k, v in r.items() if k != "run"})


if bed is not None:
    # 60 steps each: 4 whole calls of 10 steps timed (21-60), whose median (per_call) one pause of
    # the machine's other work (a full test run's other worker) does not decide
    ring = {rate: allreduce(rate, steps) for rate, steps in (("100mbit", 60), ("1gbit", 60))}
    for rate, r in ring.items():
        show(rate, {k: v for k, v in r.items() if k != "predicted"})
""", volatile=True),
        code("""
if bed is not None:
    slow, fast = ring["100mbit"], ring["1gbit"]
    sent = [float(round(r["sent_over_model"], 2)) for r in ring.values()]
    grow = fast["steps_per_s"] / slow["steps_per_s"]
    print(f"model: {slow['model_bytes']:,} bytes of gradients")
    print(f"each host sends one model's bytes a step (0.9-1.3x): {all(0.9 <= x <= 1.3 for x in sent)} (measured {sent})")
    # the bus bandwidth counts the model's bytes; the link carries them x1.06 (above) in frames (x1.05): the
    # counters' floor of 0.6 is a bus bandwidth of 0.55 (a full test run's other worker held it below 0.6 once)
    print(f"at 100 Mbit the ring's bus bandwidth is 0.55-1.0 of the link rate: {0.55 <= slow['bus_over_link'] <= 1.0} "
          f"(measured {slow['bus_over_link']:.2f})")
    print(f"the counters agree: the link carried 0.6-1.0 of its rate: {0.6 <= slow['link_use'] <= 1.0} "
          f"(measured {slow['link_use']:.2f})")
    model_grow = fast["predicted"] / slow["predicted"]  # each run's run.explain(), from its own compute
    print(f"at 1 Gbit, 10x the rate, steps/s grow, by less than 10x: {1.5 <= grow < 10} (measured x{grow:.1f}, "
          f"predicted x{model_grow:.1f}: {grow / model_grow:.2f}; the gain is not claimed against the model here: "
          f"at 1 Gbit it turns on the CPU the machine has free)")
    print(f"there the link is no longer the limit: it carried under 0.6 of its rate: {fast['link_use'] < 0.6} "
          f"(measured {fast['link_use']:.2f})")
"""),
        md("""
The run's dashboard draws each host with its link: the set rate, the share of it the run
used (from its first step to its last), the busiest link in red.
"""),
        code("""
if bed is not None:
    display(ring["100mbit"]["run"].dashboard())
""", volatile=True),
        md("""
At 100 Mbit the link is the limit and the ring fills most of it. Two things keep every
float32 figure here at or below the link rate (`bus_over_link` counts the model's float32
bytes: the 16- and 8-bit runs below send half and a quarter of them, so theirs may read
above 1 while their `link_use` stays below):

- **Whole chunks are counted.** Steps run 10 to a `tf.function` call and are reported at
  the call's end, microseconds apart. Counted from a step inside a chunk, a 24-step run
  read 17 steps in the time of 14 (x1.21): that is how an earlier version of this notebook
  read a bus bandwidth of 1.05 of the link, and fp16 x2.46 faster than float32. The
  workbench's steps/s now starts at the end of the chunk that holds the first counted step.
- **Headers.** `tbf` charges every 1,514-byte frame of a TCP stream, headers included,
  which carries 1,448 bytes of payload: TCP's payload reaches at most 0.956 of the set
  rate (`tests/test_links.py` reads 0.93-0.95 through a 100 Mbit link on this machine).

At 1 Gbit the 2 cores, which run both hosts' TensorFlow and the shaping, become the limit
before the link does (`bench/network.py` reaches ~1 Gbit/s unshaped): how much faster the
run goes there depends on how much CPU the machine has free (beside a full test run it has
read under x3), while the link stays well short of full.

## 32, 16 or 8 bits on a slow link

When the link is the bottleneck, the bytes a step sends are its time. `train(compression=...)`
(walkthrough 10) sends the gradients in float16 (`"fp16"`: half the bytes) or quantized to
int8 with one scale per tensor (`"int8"`: a quarter, plus 4 bytes a tensor). The same
ring run as above, on the same 100 Mbit links, at each width; the bytes are the links'
counters, not the workbench's own count.
"""),
        code("""
if bed is not None:
    widths = {"float32": ring["100mbit"]}
    widths.update({kind: allreduce("100mbit", steps, compression=kind) for kind, steps in (("fp16", 60), ("int8", 60))})
    for kind, r in widths.items():
        show(kind, {k: v for k, v in r.items() if k != "predicted"})
        print("    bytes the workbench handed to the all-reduce:", int(r["run"].history.comm_bytes.iloc[-1]))
""", volatile=True),
        code("""
if bed is not None:
    full = widths["float32"]
    for kind, (low, high), faster in (("fp16", (0.45, 0.6), 1.3), ("int8", (0.2, 0.35), 1.25)):
        r = widths[kind]
        share = r["sent_over_model"] / full["sent_over_model"]
        speedup, model = r["steps_per_s"] / full["steps_per_s"], r["predicted"] / full["predicted"]
        print(f"{kind} sends {low}-{high} of float32's bytes a step: {low <= share <= high} (measured {share:.2f})")
        print(f"{kind} makes >= {faster}x the steps/s of float32 on 100 Mbit: {speedup >= faster} (measured x{speedup:.2f}, "
              f"predicted x{model:.2f} by each run's run.explain())")
        if kind == "fp16":  # int8's gain turns on the CPU free for its codec: printed above, not claimed
            print(f"fp16's gain, measured / predicted, within 0.75-1.25: {0.75 <= speedup / model <= 1.25} "
                  f"(measured {speedup / model:.2f})")
    uses = [float(round(r["link_use"], 2)) for r in widths.values()]
    print(f"no width pushed more than the link carries (link_use <= 1.0): {max(uses) <= 1.0} (measured {uses})")
"""),
        md("""
On a full link the step's speed follows its bytes: 16 bits send half and 8 bits a quarter
of them, and steps/s rise with it (walkthrough 10 shows the accuracy stays). A speed-up a
little above x2 for fp16 would be no excess: float32 does not quite fill the link (its
`link_use`), fp16 may fill more of it. int8 gains less than x4: quantizing costs CPU time
on every step, and at a quarter of the bytes the 2 cores, not the link, set more of the
pace (its `link_use` is well below float32's), so how much int8 gains depends on the CPU
the machine has free: the claim asks x1.25, which a loaded machine still makes. On loopback, where no link is full, the same compression buys little or nothing
(`bench/anatomy.py`).

## The ring at 2, 3 and 4 workers: nearly flat in n

With 2 workers a ring all-reduce sends one model's bytes S per host and step, as a
parameter server would, and the ring formula cannot be told from anything else: in
general each of n hosts sends (and receives) **2(n-1)/n x S** per step, a reduce-scatter
then an all-gather of n chunks of S/n. That is 1.0 S at 2 workers, 1.33 S at 3, 1.5 S at
4, and never more than 2 S however many workers join: on a link-bound ring each step
costs at most twice the 2-worker step while the work per step grows n times.

The same 2.6 MB model on 100 Mbit links, 32 examples per worker and step, at 3 and 4
workers (each host its own engine: 3 and 4 of the bed's 6 hosts). First, before they run,
`wb.predict` answers from the 2-worker run alone (its compute per example, the workers
sharing the 2 cores, the ring's bytes for n): the way walkthrough 12 predicts 50 workers.
Then, beside each run: what the cost model (`run.explain()`, `workbench/common/costmodel.py`)
predicts for that run from the link rate, the model's bytes and the run's own compute.
"""),
        code("""
if bed is not None:
    rings = {2: ring["100mbit"]}
    ahead = {n: wb.predict(rings[2]["run"], workers=n, global_batch_size=32 * n).prediction["steps_per_s"]
             for n in (3, 4)}
    print("steps/s predicted by wb.predict from the 2-worker run, before the runs:",
          {n: round(v, 2) for n, v in ahead.items()})
    rings.update({n: allreduce("100mbit", 60, workers=n) for n in (3, 4)})
    print(" n  bytes sent per host / S  2(n-1)/n   steps/s measured  run.explain()  measured/explain  "
          "measured/wb.predict")
    for n, r in rings.items():
        before = f"{r['steps_per_s'] / ahead[n]:19.2f}" if n in ahead else "                  -"
        print(f"{n:2d}  {r['sent_over_model']:22.3f}  {2 * (n - 1) / n:8.3f}   {r['steps_per_s']:16.2f}  "
              f"{r['predicted']:13.2f}  {r['steps_per_s'] / r['predicted']:16.2f}  {before}")
""", volatile=True),
        code("""
import matplotlib.pyplot as plt

if bed is not None:
    ns = np.array(sorted(rings))
    grid = np.linspace(2, 8, 61)
    S = rings[2]["model_bytes"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.plot(grid, 2 * (grid - 1) / grid, color="#888", label="2(n-1)/n: predicted")
    left.plot(ns, [rings[n]["sent_over_model"] for n in ns], "o", color="#c30", label="measured (link counters)")
    left.set(xlabel="workers n", ylabel="bytes sent per host / S", ylim=(0, 2.1), title="a ring's bytes per host")
    scale = rings[2]["predicted"] * 2 * (2 - 1) / 2  # the model's 2-worker steps/s x its bytes
    right.plot(grid, scale / (2 * (grid - 1) / grid), color="#888", label="2 workers' prediction x 1 / (2(n-1)/n)")
    right.plot(ns, [rings[n]["predicted"] for n in ns], "s", mfc="none", color="#555", label="run.explain() predicted")
    right.plot(ns, [rings[n]["steps_per_s"] for n in ns], "o", color="#c30", label="measured")
    right.set(xlabel="workers n", ylabel="steps/s", ylim=(0, None), title="100 Mbit: steps/s against n")
    for ax in (left, right):
        ax.legend(fontsize=7)
    fig.tight_layout()
    plt.show()
    sent = {n: rings[n]["sent_over_model"] / (2 * (n - 1) / n) for n in ns}
    ratios = {n: rings[n]["steps_per_s"] / rings[n]["predicted"] for n in ns}
    print(f"each host sends 2(n-1)/n x S, within 0.95-1.1 of it at n = 2, 3, 4: "
          f"{all(0.95 <= x <= 1.1 for x in sent.values())} (measured {[round(float(x), 3) for x in sent.values()]})")
    print(f"steps/s measured / predicted within 0.65-1.25 at n = 2, 3, 4: {all(0.65 <= x <= 1.25 for x in ratios.values())} "
          f"(measured {[round(float(x), 2) for x in ratios.values()]})")
    before = {n: rings[n]["steps_per_s"] / ahead[n] for n in ahead}
    print(f"steps/s measured / wb.predict-ed from the 2-worker run before the runs, within 0.6-1.25 at n = 3, 4: "
          f"{all(0.6 <= x <= 1.25 for x in before.values())} (measured {[round(float(x), 2) for x in before.values()]})")
    drop = rings[4]["steps_per_s"] / rings[2]["steps_per_s"]
    expected = rings[4]["predicted"] / rings[2]["predicted"]
    print(f"4 workers' steps/s over 2 workers', against the cost model's (4 engines share 2 cores): within "
          f"0.65-1.35 of it: {0.65 <= drop / expected <= 1.35} (measured {drop:.2f}, predicted {expected:.2f}; "
          f"on a link-bound ring with cores to spare, 1.0 / 1.5 = 0.67)")
"""),
        md("""
A ring's bytes per host barely grow with n, so on a full link its steps/s barely fall:
each step of 4 workers does twice the work of a step of 2 (32 examples per worker) for 1.5
times the bytes, 0.67 of the steps/s. Here 4 engines share 2 cores, so each step's compute
takes twice as long at 4 workers as at 2, and the steps/s fall further: the model counts
that, and its ratio is the one checked. The cost model's prediction is computed per run from its link rates, its
model's bytes and the compute it measured; the measured bytes are the veths' counters.
Measured tends to fall below predicted as n grows (the ratios printed above; the band
allows 0.65 for a machine busier than this one): n engines share 2 cores, and each
message's own CPU time is counted by the model at its calibrated or built-in latency,
which does not grow with the workers sharing the cores. Predicted from the 2-worker run before they ran, the 3- and
4-worker runs' figures also lose what their own runs measure and the model does not
predict: how long the ring waits for its slowest worker, which grows with n
(`bench/predict.py` measures both ratios over the bed's grid: docs/performance.md); the
band allows 0.6 for the same busier machine.

## Synchronous vs asynchronous under one slow link

A synchronous all-reduce moves at the pace of its slowest link: put one MWMS worker's host
on 20 Mbit and the whole run slows to it. Asynchronous parameter-server training lets the
fast worker keep going. A smaller model here (64-512-10: 153,640 bytes), every other link
at 1 Gbit. The cost model predicts both (each run's `run.explain()`): the ring at its
slowest link's pace, the parameter server as the sum of its workers' own paces, each
worker making the share of the steps its pace makes. (The ring with every link at 1 Gbit
is latency-bound, and without `wb.calibrate_links` the model takes a message's latency
as a constant this machine beats, as in walkthrough 01's narrow cut: its predicted slowdown
is printed, not claimed; the ring is predicted with this machine's measured latency below.)
"""),
        code("""
def ps_run(workers, ps=1, ps_rate="20mbit", slow=None, steps=40, worker_rate="1gbit", **options):
    for host in bed.hosts:
        bed.set_link(host, worker_rate)
    run = cluster.train(wb.models.module_mlp(64, hidden=(512,)), wb.datasets.digits(), strategy="parameter_server",
                        workers=workers, ps=ps, global_batch_size=64, steps=steps, checkpoint_every=0, seed=0,
                        dashboard=False, **options)
    ps_hosts = [t.host for t in run.tasks if t.role == "ps"]
    for host in ps_hosts:  # the PS hosts' links, as soon as the tasks are placed
        bed.set_link(host, ps_rate)
    if slow is not None:  # one worker's host on a slow link
        bed.set_link(next(t.host for t in run.tasks if t.name == slow), "20mbit")
    run.wait()
    n, seconds, moved = stretch(run, whole=True)  # why whole: below
    util = [float(max(moved[h]) * 8 / seconds / bed.links[h]) for h in ps_hosts]
    per_step = [float(sum(moved[h]) / n) for h in ps_hosts]  # both directions
    return run, dict(steps_per_s=float(n / seconds), ps_util=util, ps_bytes_per_step=per_step)


def predicted(run):
    \"\"\"What the cost model predicts for ``run`` (``run.explain()``): steps/s, each PS
    host's link use; beside them the steps/s the run's figures measured (after its first
    fifth of steps, as the dashboard counts them), its ratio to the prediction, and the
    whole table (``ratios``: measured / predicted by figure).\"\"\"
    e = run.explain()
    p, table = e.prediction, e.table.set_index("figure")
    return dict(steps_per_s=p["steps_per_s"], measured_steps_per_s=float(table.loc["steps/s", "measured"]),
                ratio=float(table.loc["steps/s", "ratio"]), ratios=table.ratio,
                ps_util=[p["link_util"].get(t.host, float("nan")) for t in run.tasks if t.role == "ps"])


def per_worker(run):
    \"\"\"Each worker's steps/s from the end of the run's first step to its last, its
    staleness (mean, max), and the median share of its step time it waited for the chief
    to hand it work.\"\"\"
    h = run.history.sort_values("time")
    steady = h[h.step > 1]
    span = steady.time.iloc[-1] - h.time.iloc[0]
    return {w: dict(steps_per_s=float(len(g) / span), staleness=float(g.staleness.mean()), max_staleness=int(g.staleness.max()),
                    idle=float((g.wait_time / g.step_time).median()))
            for w, g in steady.groupby("worker")}


if bed is not None:
    small = wb.models.mlp((512,))
    base = allreduce("1gbit", 300, model=small)
    sync = allreduce("1gbit", 60, model=small, slow="worker:1")
    async_run = ps_run(workers=2, ps_rate="1gbit", slow="worker:1", steps=320)[0]
    workers = per_worker(async_run)
    events = sync["run"].events
    print("MWMS steps/s, all at 1 Gbit:", round(base["steps_per_s"], 1), "| worker:1 at 20 Mbit:", round(sync["steps_per_s"], 1))
    print("PSS, worker:1 at 20 Mbit: steps/s", round(sum(r["steps_per_s"] for r in workers.values()), 1))
    for w, r in workers.items():
        print("   ", w, {k: round(v, 3) for k, v in r.items()})
    print(events[events.kind == "injected"][["fault", "host", "rate", "step"]].to_string(index=False))
""", volatile=True),
        code("""
if bed is not None:
    pace = sync["steps_per_s"] / base["steps_per_s"]
    fast_worker, slow_worker = workers["worker:0"], workers["worker:1"]
    ahead = fast_worker["steps_per_s"] / slow_worker["steps_per_s"]
    async_gain = (fast_worker["steps_per_s"] + slow_worker["steps_per_s"]) / sync["steps_per_s"]
    print(f"MWMS with one 20 Mbit link: steps/s <= 0.5x of all links at 1 Gbit: {pace <= 0.5} (measured x{pace:.2f}, "
          f"predicted x{sync['predicted'] / base['predicted']:.2f})")
    print(f"PSS with one 20 Mbit worker: the fast worker makes >= 1.5x the slow one's steps/s: {ahead >= 1.5} "
          f"(measured {fast_worker['steps_per_s']:.1f} vs {slow_worker['steps_per_s']:.1f}, x{ahead:.1f})")
    ps_model = predicted(async_run)  # run.explain(): each worker at its own pace, the rate their sum
    print(f"PSS with the same slow link: >= 1.5x the steps/s of MWMS: {async_gain >= 1.5} (measured x{async_gain:.1f}, "
          f"predicted x{ps_model['steps_per_s'] / sync['predicted']:.1f})")
    print(f"PSS's steps/s, measured / predicted with each worker at its own pace, within 0.75-1.25: "
          f"{0.75 <= ps_model['ratio'] <= 1.25} (measured {ps_model['ratio']:.2f})")
    step = ps_model["ratios"]  # a step's parts: each worker's by its steps
    step_ratios = [step["step time per worker (ms)"], step["communication per step (ms)"]]
    print(f"PSS's step time and its communication, measured / predicted per step, within 0.75-1.25: "
          f"{all(0.75 <= r <= 1.25 for r in step_ratios)} (measured {step_ratios[0]:.2f} and {step_ratios[1]:.2f})")
    print(f"staleness, other updates applied during a step, mean below 1 for both workers: "
          f"{max(fast_worker['staleness'], slow_worker['staleness']) < 1} "
          f"(measured {fast_worker['staleness']:.2f} fast, {slow_worker['staleness']:.2f} slow)")
    injected = [str(rate) for rate in events[events.kind == "injected"].rate]
    print(f"the injected slow link is in the MWMS run's events: {injected == ['20mbit']} (injected rates: {injected})")
"""),
        md("""
What the two learn, per example and per second: the training loss of each run (its
workers' mean per step, smoothed over 10 steps, the steps in the order they ended on their
workers) against the examples its updates used, and against the seconds since its first
step ended.
"""),
        code("""
if bed is not None:
    fig, (by_examples, by_time) = plt.subplots(1, 2, figsize=(11, 3.4), sharey=True)
    for label, run in (("MWMS, all at 1 Gbit", base["run"]), ("MWMS, worker:1 at 20 Mbit", sync["run"]),
                       ("PSS, worker:1 at 20 Mbit", async_run)):
        # each update in the order it ended on its worker (the chief numbers them as it collects)
        h = run.history.groupby("step").agg(loss=("loss", "mean"), time=("time", "max")).sort_values("time")
        smooth = h.loss.rolling(10, min_periods=1).mean()
        by_examples.plot(np.arange(1, len(h) + 1) * run.job.global_batch_size, smooth, label=label)
        by_time.plot(h.time - h.time.iloc[0], smooth, label=label)
    by_examples.set(xlabel="examples used by updates", ylabel="training loss (10-step mean)", xlim=(0, 4000))
    by_time.set(xlabel="seconds since the first step", xlim=(0, None))
    by_examples.legend(fontsize=8)
    fig.suptitle("Sync vs async with one worker on a 20 Mbit link")
    plt.show()
""", volatile=True),
        code("""
if bed is not None:
    fast_losses, slow_losses = (r.history.groupby("step").loss.mean() for r in (base["run"], sync["run"]))
    same = float((fast_losses.loc[slow_losses.index] - slow_losses).abs().max())
    print(f"the slow link changes the time, not the updates: the two MWMS runs' losses agree step by step "
          f"to 1e-6: {same < 1e-6} (measured {same:.1e})")
"""),
        md("""
### The latency-bound ring, with this machine's latency measured

With every link at 1 Gbit the small model's ring is latency-bound: each of a step's two
messages carries half its 153,640 bytes, 0.6 ms on the wire at 1 Gbit, so the fixed wait of
each message weighs as much as its bytes. Uncalibrated, the model takes a
message's wait as its constant (2 ms), which this machine beats. `wb.calibrate_links`
measures it with TF's own ring across two of the bed's hosts, links unshaped (a 16-tensor
model all-reduced in one pack and in 16: the 15 more packs' messages give the wait each),
and `wb.predict(run, latency=...)` predicts the same run with it. `save=False`: the
measurement is used here, not kept for this machine's later explanations. The ratio is
printed, not checked: executions of this notebook on this machine measured 0.82-1.77 ms
a message, and the model takes one latency for two things that differ here, a
collective's own (a 1-pack ring on this loopback: about 1.4 ms a message) and each
further pack's (about 0.8 ms), which is what the calibration measures.
"""),
        code("""
if bed is not None:
    for host in bed.hosts:
        bed.set_link(host, None)
    path = wb.calibrate_links(cluster, save=False)
    alpha = path["alpha_s"]
    with_alpha = wb.predict(base["run"], latency=alpha).table.set_index("figure").loc["steps/s", "predicted"]
    ring = base["run"].explain().table.set_index("figure").loc["steps/s"]
    print(f"the all-1 Gbit ring's steps/s, measured / predicted with the measured latency, printed, not checked "
          f"(measured {ring['measured'] / with_alpha:.2f}: "
          f"{ring['measured']:.0f} steps/s against {with_alpha:.0f}, at {alpha * 1e3:.2f} ms a message; "
          f"with the constant 2 ms {ring['ratio']:.2f})")
"""),
        md("""
Per example the curves stay close (the left panel, over the examples the shortest run
used; the two MWMS runs are one curve, as checked above): with staleness measured at 0,
each asynchronous update here is computed from the current parameters, and asynchronous
SGD learns about as sequential SGD does, from its two workers' batches in turn. The "better
gradient effectiveness" the source documents credit to synchronous training is what
stale gradients lose, and TF's runtime on this machine does not let them go stale (above).
Per second (right; a run's steps arrive in calls of several steps, hence the stairs) the
synchronous run with a slow link crawls, while the parameter server keeps the fast
worker's updates coming.

MWMS moves at its slowest link's pace; under PSS the fast worker goes on, but not freely:
its `idle` above is the median share of its step time spent waiting for the chief, which
collects results in the order it scheduled them (at most 2 calls of 10 steps per worker
in flight), so a slow worker's call holds back the fast one's next calls.

Parameter-server runs are timed here from the end of their first step to their last. The
chief numbers steps as it collects results, in the order it scheduled the calls (each
row carries its call's end on its worker), so a call that finished early is collected
late: a stretch that starts mid-run holds steps that ran before it (a 40-step run once
read 27 steps/s through a link that carries 15). The first step is a call of its own, collected before any other is
scheduled: every later step ran after it.

**Staleness is measured, and it is small.** The `staleness` column counts the updates
other workers applied between a step's read of the global step and its own update. The
textbook expects a slow worker's gradients to be many updates old; measured here they are
not (the means above). The reason is TF's runtime, not the measurement: it mostly runs the
PS side of one scheduled call at a time, so another worker's update seldom lands inside a
step. A plain-TF probe without the workbench (1 PS, each worker reading a PS counter, doing
20 matmuls and updating it) saw 0 of 400 calls overlap. Here, as in walkthrough 02, the
runs are looped (calls of 10 steps; runs of 1,000 steps or more are unrolled); 02's longer
runs show up to a few percent of steps stale.

## A parameter server's link fills up as workers grow; 2 PS split it

Under ParameterServerStrategy every worker step pulls the variables from the PS and
pushes its gradients back: S bytes each way (S = 153,640 here) cross the PS host's link
per global step, whatever the number of workers. A worker pulls, computes, then pushes:
its step takes two transfers of S / (its link's bytes/s), one after the other, plus its
compute. While one worker pushes, another can pull: the PS link carries both ways at
once. The cost model puts this into numbers (claim 3 of the teaching references takes a
round as max(S/B, n S/(k B)) on k PS links of B bytes/s, a worker's pull and push at once;
measured here, one worker's pull and push go one after the other, 2 S/B):

- each worker alone: r1 = 1 / (2 S / B_worker + 2 alpha + C) steps/s, alpha the latency of
  a message (2 ms here), C the compute the run measured (it grows as workers share the
  2 cores);
- n workers: min(n / (2 S / B_worker + 2 alpha + C_n), k x B_ps / S), the PS links' rate as
  soon as the workers reach it.

Give every host 10 Mbit, the PS host too: one worker uses each way of the PS link about
half the time; two could fill it if one always pulled while the other pushed, and a third
adds load but no more steps (it can even lose some). (The model predicts 2 workers' gain from their compute on shared
cores and the links, and the PS link not yet full; it takes their transfers as
interleaving whenever they can. They do not always: when both pull at once, each pull
takes twice as long, so the gain measured varies from one execution to the next and is
checked against the model's, not against a fixed number. The third worker gains less than
the model predicts, and why, this notebook does not measure: 3 workers, the chief and the
PS share the 2 cores, and the band below allows it 0.65, as the ring's does.) Then spread the variables over 2 PS tasks on 2 hosts (each 10 Mbit): first
*without* a partitioner (PS tasks take whole variables round-robin, every kernel on `ps:0`,
every bias on `ps:1`: one PS link carries nearly all the bytes), then with each variable
split in two (`variable_partitioner=2`; the model is a `tf.Module` MLP, since Keras 3
models cannot be sharded, see walkthrough 02): each PS link carries half, and 3 workers
run faster than through one PS, though short of 3 x r1: the 2 cores slow each worker.

The bed's links carry a message at their rate (`links.shape`: tbf's bucket is one frame
plus 500 us of traffic). With the bed's earlier bucket, 128 KiB, each 150 KB message left
at line speed from a full bucket, the two ways refilled at once, and one worker's pull and
push seemed to overlap: an earlier execution of this notebook (a 5 Mbit worker link, a
10 Mbit PS link) read 3.75 steps/s for one worker, about twice what its 5 Mbit link
allows for a pull and a push (`bench/README.md`, test bed links).
"""),
        code("""
def rounded(r):
    return {k: [round(x, 3) for x in v] if isinstance(v, list) else round(v, 2) for k, v in r.items()}


if bed is not None:
    load = {}
    for label, n, k, options in (("1 worker, 1 PS", 1, 1, {}), ("2 workers, 1 PS", 2, 1, {}),
                                 ("3 workers, 1 PS", 3, 1, {}), ("3 workers, 2 PS, not sharded", 3, 2, {}),
                                 ("3 workers, 2 PS, sharded", 3, 2, {"variable_partitioner": 2})):
        # 4 calls of 10 steps per worker: the first (traced) is a small part of the run. One
        # worker runs 80: the anatomy leaves a run's first two calls (its start-up) out of the
        # compute explain() predicts from only past 40 steps; at 40 it read 1.01-1.25 of it.
        # Only where the bytes go counts for 2 PS without a partitioner: 40 steps, too few
        # calls per worker for steps/s, not predicted
        timed = k == 1 or bool(options)
        run, measured = ps_run(workers=n, ps=k, ps_rate="10mbit", worker_rate="10mbit",
                               steps=40 * max(n, 2) if timed else 40, **options)
        load[label] = dict(measured=measured, predicted=predicted(run) if timed else None, run=run)
        print(f"{label:29s} measured {rounded(measured)}")
        print(f"{'':29s} predicted {rounded(load[label]['predicted']) if timed else '- (bytes only)'}")
""", volatile=True),
        code("""
if bed is not None:
    S = 153_640
    one, two, three = (load[f"{n} worker{'s' if n > 1 else ''}, 1 PS"] for n in (1, 2, 3))
    flat, sharded = load["3 workers, 2 PS, not sharded"], load["3 workers, 2 PS, sharded"]
    moved = [r["measured"]["ps_bytes_per_step"][0] / (2 * S) for r in (one, two, three)]
    ratios = [r["predicted"]["ratio"] for r in (one, two, three, sharded)]
    grow, more = (two["measured"]["steps_per_s"] / one["measured"]["steps_per_s"],
                  three["measured"]["steps_per_s"] / two["measured"]["steps_per_s"])
    busy = max(flat["measured"]["ps_bytes_per_step"]) / sum(flat["measured"]["ps_bytes_per_step"])
    share = max(sharded["measured"]["ps_bytes_per_step"]) / sum(sharded["measured"]["ps_bytes_per_step"])
    faster = sharded["measured"]["steps_per_s"] / three["measured"]["steps_per_s"]
    print(f"the PS link carries S each way per global step at 1, 2 and 3 workers (1.0-1.3 of 2 S, with the "
          f"headers, acknowledgements and requests): {all(1.0 <= x <= 1.3 for x in moved)} "
          f"(measured {[round(x, 3) for x in moved]})")
    print(f"steps/s measured / predicted (run.explain()) within 0.75-1.25 for 1 and 2 workers and sharded, "
          f"0.65-1.25 for 3: {all(0.75 <= x <= 1.25 for x in ratios[:2] + ratios[3:]) and 0.65 <= ratios[2] <= 1.25} "
          f"(measured {[round(x, 2) for x in ratios]})")
    print(f"one worker leaves the PS link half idle (use 0.3-0.6): {0.3 <= one['measured']['ps_util'][0] <= 0.6} "
          f"(measured {one['measured']['ps_util'][0]:.2f}, predicted {one['predicted']['ps_util'][0]:.2f})")
    gain = two["predicted"]["steps_per_s"] / one["predicted"]["steps_per_s"]
    print(f"two workers make more steps/s than one, as many more as the model predicts (measured gain / "
          f"predicted within 0.75-1.25): {grow > 1 and 0.75 <= grow / gain <= 1.25} "
          f"(measured x{grow:.2f}, predicted x{gain:.2f})")
    print(f"the third adds little: 3 workers make 0.6-1.25x of 2 workers' steps/s: {0.6 <= more <= 1.25} "
          f"(measured x{more:.2f}, predicted x{three['predicted']['steps_per_s'] / two['predicted']['steps_per_s']:.2f})")
    use1, use3 = one["measured"]["ps_util"][0], three["measured"]["ps_util"][0]
    print(f"with 3 workers the PS link carries >= 0.6 of its rate, more than with one: {use3 >= 0.6 and use3 > use1} "
          f"(measured {use3:.2f}, one worker {use1:.2f})")
    print(f"2 PS without a partitioner: one PS link carries >= 90% of the bytes: {busy >= 0.9} (measured {busy:.0%})")
    print(f"2 PS, sharded: the busier PS link carries 40-60% of the bytes: {0.4 <= share <= 0.6} (measured {share:.0%})")
    print(f"sharded over 2 PS hosts, 3 workers make >= 1.2x the steps/s of 1 PS: {faster >= 1.2} "
          f"(measured x{faster:.2f}, predicted x{sharded['predicted']['steps_per_s'] / three['predicted']['steps_per_s']:.2f})")
    # steps/s as the dashboard counts them (run.explain()'s measured) beside its prediction
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    ns = [1, 2, 3]
    left.plot(ns, [r["predicted"]["steps_per_s"] for r in (one, two, three)], "s--", mfc="none", color="#555",
              label="1 PS: predicted (run.explain())")
    left.plot(ns, [r["predicted"]["measured_steps_per_s"] for r in (one, two, three)], "o-",
              color="#c30", label="1 PS: measured")
    left.plot([3], [sharded["predicted"]["steps_per_s"]], "s", mfc="none", color="#2471a3", label="2 PS, sharded: predicted")
    left.plot([3], [sharded["predicted"]["measured_steps_per_s"]], "o", color="#2471a3",
              label="2 PS, sharded: measured")
    one_link = parse_rate("10mbit") / 8 / S  # steps/s of one PS link moving S each way per step
    left.axhline(one_link, color="#888", ls=":", lw=1)
    left.text(1.05, one_link * 1.02, "one 10 Mbit PS link's S each way", fontsize=7, color="#555")
    left.set(xticks=ns, xlabel="workers", ylabel="steps/s", ylim=(0, None), title="10 Mbit links: a PS link fills up")
    left.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.18))  # under the chart
    wb.predicted_vs_measured(["1 worker", "3 workers"], [r["predicted"]["ps_util"][0] for r in (one, three)],
                             [r["measured"]["ps_util"][0] for r in (one, three)], ax=right, color="#c30",
                             ylabel="PS link use (busier way)", title="the PS link's use")
    plt.show()
"""),
        md("""
The predictions above take each run's own compute and link rates. Measured/predicted
compares them with the steps/s the run's figures count (the dashboard's, after its first
fifth of steps: `run.explain()`'s own ratio); the other figures here count from the end of
a run's first step to its last (the chief's order of collection, above), the bytes from
the PS hosts' link counters over the same seconds.
Why such slow links: the same 2 cores run the chief, the PS tasks and 3 workers. With
20/40 Mbit links they, not the links, held 3 workers to ~27 steps/s of this model (an
earlier execution of this notebook); at
10 Mbit the links allow at most ~8 steps/s through one PS and ~16 through two.

An engine restarts (over SSH, several seconds) only when a run needs a different cluster
of TF tasks than the one it holds: here at each change of the number of workers or PS
tasks.
"""),
        md("""
## A ring against one parameter server, at equal links

Claims 1 and 3 together give the textbook's comparison: at equal links of B bytes/s, one
round of n workers (each computing a batch) costs a single PS's link n x S / B each way,
and a ring 2(n-1)/n x S / B on every link, so the ring is n^2 / (2(n-1)) times faster: x2.25
at n = 3, x2.7 at 4. The same 153,640-byte model as the PS runs above, as a ring of 3
workers with every link at 10 Mbit and 64 examples per worker and step, as each PS worker
step computes: its examples/s against the 3-worker, 1-PS run's. The formula takes the PS
link as full both ways at once; measured above, a worker pulls then pushes, and 3 workers
fill the PS link only in part, so the ring wins by more. The cost model predicts both runs
(each run's `run.explain()`), and the check compares the measured gain with its
prediction; the band allows what the 3-worker PS run's own ratio allows (0.65, above).
"""),
        code("""
if bed is not None:
    ring3 = allreduce("10mbit", 60, model=small, workers=3, batch=64)
    show("ring, 3 workers, 10 Mbit", {k: v for k, v in ring3.items() if k != "predicted"})
""", volatile=True),
        code("""
if bed is not None:
    ps3 = load["3 workers, 1 PS"]
    # examples/s of each: steps/s as the dashboard counts them (after the first fifth), and as
    # run.explain() predicts them, times the examples of one step: a ring step computes every
    # worker's batch (its global batch), a PS step one worker's (the PS run's global batch)
    n, ring_batch, ps_batch = ring3["run"].job.workers, ring3["run"].job.global_batch_size, ps3["run"].job.global_batch_size
    ring_measured, ring_predicted = ring3["figure_steps_per_s"] * ring_batch, ring3["predicted"] * ring_batch
    ps_measured, ps_predicted = (ps3["predicted"][k] * ps_batch for k in ("measured_steps_per_s", "steps_per_s"))
    gain, model_gain, textbook = ring_measured / ps_measured, ring_predicted / ps_predicted, n ** 2 / (2 * (n - 1))
    ring_sent = ring3["sent_over_model"] / (2 * (n - 1) / n)
    print(f"{n} workers, every link 10 Mbit: ring {ring_measured:,.0f} examples/s (predicted {ring_predicted:,.0f} "
          f"examples/s), one PS {ps_measured:,.0f} examples/s (predicted {ps_predicted:,.0f} examples/s)")
    print(f"each ring host sends 2(n-1)/n x S, within 0.95-1.1 of it: {0.95 <= ring_sent <= 1.1} "
          f"(measured {ring_sent:.3f})")
    print(f"at equal links the ring beats one PS by >= 1.5x (the textbook's n^2 / (2(n-1)) = {textbook:.2f} at n = {n}): "
          f"{gain >= 1.5} (measured x{gain:.2f})")
    print(f"the ring's gain over one PS, measured / the cost model's, within 0.65-1.5: {0.65 <= gain / model_gain <= 1.5} "
          f"(measured x{gain:.2f}, predicted x{model_gain:.2f}: {gain / model_gain:.2f})")
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    ax.hlines([ps_measured * textbook], 1.0, 1.4, color="k", label=f"one PS measured x {textbook:.2f} (the textbook's gain)")
    wb.predicted_vs_measured([f"{n} workers, one PS", f"{n} workers, a ring"], [ps_predicted, ring_predicted],
                             [ps_measured, ring_measured], ax=ax, color="#c30", ylabel="examples/s",
                             predicted_label="predicted (run.explain())",
                             title=f"every link 10 Mbit, {ps_batch} examples a worker step")
    plt.show()
"""),
        md("""
## Clean up
"""),
        code("""
if bed is not None:
    cluster.stop()
    bed.close()   # sshd, namespaces, links, the bridge: nothing left behind
"""),
    ]
