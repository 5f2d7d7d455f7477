"""12: scaling efficiency, measured where this machine can, predicted to 50 workers."""

from make_notebooks import code, md

NAME = "12_scaling_efficiency"


def cells():
    return [
        md("""
# Scaling efficiency: what "40x on 50 GPUs" takes

The source documents quote Google's experience: Inception trained 40x faster on 50 GPUs,
dense models 10-40x faster with 50 replicas. A speed-up of 40 on 50 workers is a
**scaling efficiency** of 40 / 50 = 0.8: each worker spends 80% of its step computing and
20% waiting for the gradients' all-reduce. Without overlap of the two (TF's collectives
start after the whole backward pass), a worker's step is its compute C plus the ring's
communication:

- T_comm(n) = 2(n-1) x alpha + 2(n-1)/n x S / B (S the gradients' bytes, B a link's
  bytes/s, alpha each message's latency);
- efficiency = C / (C + T_comm(n)), so 0.8 needs C >= 4 x T_comm(n).

C grows with the batch each worker computes; T_comm does not. This notebook measures that
lever on this machine (2 workers, 2 cores, over loopback), checks the cost model against
each measurement (`run.explain()`), then asks the model (`wb.predict`) what 50 workers on
separate machines would do, and what batch per worker and network give 40x. Those last
tables are **predicted**: this machine has 2 cores and cannot run 50 workers.
"""),
        code("""
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import workbench as wb

cluster = wb.Cluster(engines=2).start()
digits = wb.datasets.digits()
model = wb.models.mlp((2048, 256))  # 64-2048-256-10: 2.6 MB of float32 gradients
args = dict(data=digits, learning_rate=0.01, seed=0, checkpoint_every=0, dashboard=False)
STEPS = {16: 400, 64: 300, 256: 150}


def examples_per_s(run):
    \"\"\"(measured, predicted) examples/s of ``run``: its steps/s as the dashboard counts them
    and as ``run.explain()`` predicts them from the run's own compute, times its global batch.\"\"\"
    t = run.explain().table.set_index("figure")
    batch = run.job.global_batch_size
    return t.loc["steps/s", "measured"] * batch, t.loc["steps/s", "predicted"] * batch
"""),
        md("""
## The lever: the batch each worker computes

For a batch per worker of 16, 64 and 256: one process alone (`single`), then 2 workers
(`multi_worker_mirrored`, a global batch of twice as many). The speed-up is the 2 workers'
examples/s over the single process's at the same batch per worker (weak scaling, as the
seeds' numbers are); measured, and predicted by the model from the 2-worker run's own
compute and this machine's loopback (about 0.8 GB/s and 1.5 ms a message, both the CPU's).
"""),
        code("""
runs, rows = {}, []
for b in (16, 64, 256):
    one = cluster.train(model, strategy="single", workers=1, global_batch_size=b, steps=STEPS[b], **args).wait()
    two = cluster.train(model, strategy="multi_worker_mirrored", workers=2, global_batch_size=2 * b,
                        steps=STEPS[b], **args).wait()
    runs[b] = two
    alone, _ = examples_per_s(one)
    measured, predicted = examples_per_s(two)
    t = two.explain().table.set_index("figure")
    rows.append({"batch per worker": b,
                 "compute ms": t.loc["compute per step (ms)", "measured"],
                 "all-reduce ms, measured": t.loc["communication per step (ms)", "measured"],
                 "all-reduce ms, predicted": t.loc["communication per step (ms)", "predicted"],
                 "speed-up, measured": measured / alone, "speed-up, predicted": predicted / alone})
lever = pd.DataFrame(rows).set_index("batch per worker")
lever["efficiency, measured"] = lever["speed-up, measured"] / 2
lever.round(2)
""", volatile=True),
        code("""
share = lever["compute ms"] / (lever["compute ms"] + lever["all-reduce ms, measured"])
comm = lever["all-reduce ms, measured"] / lever.loc[16, "all-reduce ms, measured"]
grew = lever.loc[256, "compute ms"] / lever.loc[16, "compute ms"]
print(f"from 16 to 256 examples per worker the compute grows >= 2.5x, and more than the all-reduce's time: "
      f"{grew >= 2.5 and grew > comm[256]} (measured compute x{grew:.1f}, all-reduce {comm.round(2).tolist()})")
print(f"so a worker's share of its step spent computing, C / (C + T_comm), the efficiency without overlap, "
      f"rises with the batch per worker: at 256 >= 1.3x its value at 16: {share[256] >= 1.3 * share[16]} "
      f"(measured {share[16]:.2f} -> {share[64]:.2f} -> {share[256]:.2f})")
"""),
        md("""
The all-reduce moves the same 2.6 MB whatever the batch, so its time stays put while the
compute grows with the examples: the share of the step spent communicating falls, and the
efficiency rises. The claim reads it inside the 2-worker runs (compute and all-reduce of
the same steps); the table's speed-up and efficiency divide by a single process timed at
another moment, and on a busy machine they move with the load. And the speed-ups are below 1: here 2 workers are *slower* than one
process. They share this machine's 2 cores, which the single process had to itself for its
matrix products, and their all-reduce over loopback is itself CPU work on the same cores
(gRPC's copies, both ways at once). Workers sharing cores is not scaling out; this is why
the rest of this notebook predicts separate machines instead of measuring them. The
model's all-reduce here comes from constants, loopback at about 0.8 GB/s and 1.5 ms a
message (measured with 4-64 MB all-reduces on a loaded machine); the table puts the runs'
own beside it. How close they come moves with the machine's load: on a busy machine (this
notebook under the test suite, beside other tests) the runs' all-reduce takes longer than
the constants say, and the model's speed-ups sit above the measured ones. The table shows
both, and no band checks them here. Walkthrough 09 checks
the same model against rings on shaped links, where the link, not the loaded CPU, sets
the pace.

## From 2 workers to 50: predicted

`wb.predict(run, workers=n, link=..., cores=None, global_batch_size=...)` takes the
2-worker run at 256 examples per worker as its calibration (its compute per example) and
predicts the same training with n workers, each on a host of its own with its own cores
(`cores=None`), over links of the given rate. `latency=` sets each message's wait: the 2 ms
TF's collectives pay between engines on this machine's emulated hosts (the model's
constant, from the bed's measurements; `run.explain()` uses it), or 50 microseconds, a data centre's. It scales
the compute in proportion to the examples; the first table shows a fixed part besides (the
update of 660,234 parameters, the step's own ops), so predictions far from 256 examples per
worker are rough.
"""),
        code("""
calibration = runs[256]
ns = [2, 4, 8, 16, 32, 50, 64]


def speedups(batch, link, latency):
    out = []
    for n in ns:
        t = wb.predict(calibration, workers=n, link=link, cores=None, global_batch_size=n * batch,
                       latency=latency).table.set_index("figure")
        out.append(t.loc["speed-up over one worker with the same global batch", "predicted"])
    return out


curves = {(256, "10gbit", 2e-3): speedups(256, "10gbit", 2e-3), (256, "10gbit", 50e-6): speedups(256, "10gbit", 50e-6),
          (2048, "10gbit", 50e-6): speedups(2048, "10gbit", 50e-6)}
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.plot(ns, ns, ":", color="#888", label="ideal (n)")
for (batch, link, latency), s in curves.items():
    ax.plot(ns, s, "o-", label=f"{batch} per worker, {link}, {latency * 1e6:g} us a message")
ax.plot([50], [40], "*", markersize=14, color="#c0392b", label="40x on 50")
ax.set(xlabel="workers", ylabel="speed-up (predicted)", title="Ring all-reduce, 2.6 MB of gradients: predicted")
ax.legend(fontsize=8)
plt.show()
print(pd.DataFrame({f"{b}/worker, {l}, {a * 1e6:g} us": [round(x, 1) for x in s] for (b, l, a), s in curves.items()},
                   index=pd.Index(ns, name="workers")).to_string())
""", volatile=True),
        md("""
At this machine's 2 ms a message, a ring of 50 pays 2 x 49 x 2 ms = 196 ms of latency every
step, whatever the link's rate: the speed-up flattens long before 50. At 50 microseconds
the latency shrinks to 4.9 ms, and the bytes (2 x 49/50 x 2.6 MB at 10 Gbit/s: 4.3 ms)
become the cost: 40x needs a batch per worker whose compute takes 4 x that, and the curves
show how far 256 and 2048 examples per worker go.

## The condition, solved

The smallest batch per worker (a power of 2) at which the model predicts >= 40x on 50
workers, for each link rate and latency, beside the formula's own answer: C(b) >= 4 x
T_comm(50), with C(b) the calibration's compute per example times b. The model asks more:
it also counts each step's fixed costs (the input pipeline, Python between calls), which a
larger batch does not grow, and the table rounds its answer up to a power of 2.
"""),
        code("""
per_example = calibration.explain().table.set_index("figure").loc["compute per step (ms)", "measured"] / 1e3 / 256
S = calibration.explain().table.set_index("figure").loc["bytes handed to the all-reduce per step", "predicted"]
rows = []
for link, rate in (("1gbit", 1e9), ("10gbit", 10e9), ("100gbit", 100e9)):
    for latency in (2e-3, 50e-6):
        t_comm = 2 * 49 * latency + 2 * 49 / 50 * S / (rate / 8 * 0.95)
        formula = 4 * t_comm / per_example
        found = next((b for b in 2 ** np.arange(4, 17)
                      if wb.predict(calibration, workers=50, link=link, cores=None, global_batch_size=50 * int(b),
                                    latency=latency).table.set_index("figure")
                      .loc["speed-up over one worker with the same global batch", "predicted"] >= 40), None)
        rows.append({"link": link, "latency (us)": latency * 1e6, "T_comm at 50 (ms)": round(t_comm * 1e3, 1),
                     "formula: batch per worker >=": int(np.ceil(formula)), "wb.predict: smallest power of 2": found})
condition = pd.DataFrame(rows)
print(f"calibration: {per_example * 1e6:.0f} us of compute per example per worker, {S / 1e6:.2f} MB a step (predicted)")
condition
""", volatile=True),
        md("""
Read the table as the scaling book's roofline for data parallelism (its training chapter;
CS336 writes the same bound as N <= 1 + B x W / C): below that batch per worker the ring is
the bottleneck, above it the compute. Faster links lower the batch needed only while the
bytes dominate; once the latency does (2 ms a message), only fewer, larger messages or
fewer ring steps help: a batch of tens of thousands per worker is what a 2 ms network asks.
Inception's 40x on 50 GPUs ran large convolutional steps on each GPU (hundreds of
milliseconds), on links of a few microseconds' latency.

## The other levers

- **16-bit gradients** halve the bytes (walkthrough 09 measures their gain in steps/s on a
  100 Mbit link; 10 measures the bytes exactly). They shorten only the bytes' part: predicted below
  at 50 workers.
- **Packing** (TF's `bytes_per_pack`): the workbench's steps hand all the gradients to one
  all-reduce, one pack, paying 2(n-1) latencies once; a pack per tensor (6 here) pays them
  6 times: predicted below at 50 workers, measured on this machine in the next section.
- **Overlap** of the all-reduce with the backward pass (Horovod, PyTorch DDP) hides
  communication behind compute: max(C, T_comm) instead of their sum. TF's collectives here
  start after the backward pass; the model assumes none.
"""),
        code("""
rows = []
for label, kwargs in (("float32", {}), ("fp16", {"compression": "fp16"}), ("float32, a pack per tensor",
                                                                          {"bytes_per_pack": 1})):
    t = wb.predict(calibration, workers=50, link="10gbit", cores=None, global_batch_size=50 * 256,
                   latency=50e-6, **kwargs).table.set_index("figure")
    rows.append({"messages": label, "speed-up on 50 (predicted)": round(t.loc[
        "speed-up over one worker with the same global batch", "predicted"], 1),
        "all-reduce ms (predicted)": round(t.loc["communication per step (ms)", "predicted"], 2)})
pd.DataFrame(rows).set_index("messages")
""", volatile=True),
        md("""
## Packing, measured: what one message costs

TF packs the gradients before its ring runs (`CommunicationOptions(bytes_per_pack=...)`,
PyTorch's buckets): by default all of them in one pack, one all-reduce, so a step pays
2(n-1) latencies once. `train(bytes_per_pack=N)` groups them, last layer first, into packs
that each take tensors until they hold more than N bytes, one all-reduce each, each paying its own 2(n-1) latencies for the same
bytes: the cost packing removes, (packs - 1) x 2(n-1) x alpha. That makes packing an
instrument too. An MLP of 16 tensors (7 hidden layers of 32 and an output layer), 2 workers of
16 examples: in 1 pack,
in 16 (`bytes_per_pack=1`, a pack a tensor), and in 4 (`bytes_per_pack=5000`). The
first two measure alpha, the cost of one message on this machine: the growth of the
all-reduce over 30 more messages. With it, the formula predicts the third. On an idle
machine the third run came within 0.75-1.5 of that prediction; beside the test suite's
other tests, whose load moves between the three runs, it did not, so only its order is
checked here (tests/test_explain.py checks the band with a larger batch).
"""),
        code("""
from workbench.common import costmodel
from workbench.kernel.runs.explain import tensor_bytes

deep = wb.models.mlp((32,) * 7)
packing_runs = {per_pack: cluster.train(deep, strategy="multi_worker_mirrored", workers=2, global_batch_size=32,
                                        steps=300, bytes_per_pack=per_pack, **args).wait() for per_pack in (0, 1, 5000)}
rows = []
for per_pack, run in packing_runs.items():
    t = run.explain().table.set_index("figure")
    rows.append({"bytes_per_pack": per_pack, "packs": costmodel.packs(tensor_bytes(run.placement), per_pack),
                 "all-reduce ms, measured": t.loc["communication per step (ms)", "measured"],
                 "steps/s, measured": t.loc["steps/s", "measured"]})
packing = pd.DataFrame(rows).set_index("bytes_per_pack")
packing["messages a step"] = 2 * packing.packs
packing.round(2)
""", volatile=True),
        code("""
comm = packing["all-reduce ms, measured"]
alpha = (comm[1] - comm[0]) / (2 * (packing.packs[1] - packing.packs[0]))  # ms a message
four = comm[0] + 2 * (packing.packs[5000] - 1) * alpha
print(f"the model counts 1, 16 and 4 packs (TF's grouping, costmodel.packs): {packing.packs.tolist() == [1, 16, 4]} "
      f"(counted {packing.packs.tolist()} for bytes_per_pack {packing.index.tolist()})")
print(f"a pack per tensor costs more than one pack, >= 0.1 ms a message: {alpha >= 0.1} "
      f"(measured alpha {alpha:.2f} ms a message)")
print(f"4 packs cost between 1 and 16: {comm[0] < comm[5000] < comm[1]} (measured {comm[5000]:.2f} ms; "
      f"predicted from the other two with that alpha {four:.2f}, {comm[5000] / four:.2f} of it)")
"""),
        md("""
The model's own constants for a message's latency are a loaded machine's: 1.5 ms over one
machine's loopback and 2 ms between the bed's hosts, mostly waiting for one of the 2 cores.
The alpha measured above is this execution's, which is why `wb.predict(latency=...)` takes
one. At 50 workers, the 2.6 MB model's 6 tensors in one pack or a pack each, with it:
"""),
        code("""
rows = []
for per_pack in (0, 1):
    t = wb.predict(calibration, workers=50, link="10gbit", cores=None, global_batch_size=50 * 256,
                   latency=alpha / 1e3, bytes_per_pack=per_pack).table.set_index("figure")
    rows.append({"bytes_per_pack": per_pack, "all-reduce ms (predicted)": round(t.loc["communication per step (ms)",
                                                                                      "predicted"], 1),
                 "speed-up on 50 (predicted)": round(t.loc["speed-up over one worker with the same global batch",
                                                           "predicted"], 1)})
pd.DataFrame(rows).set_index("bytes_per_pack")
""", volatile=True),
        md("""
The 50-worker tables are predicted, not measured. What this machine measured is the first
table, the lever itself (a larger batch per worker raising the efficiency) and how far the
model's prediction for 2 workers sits from it (the table's two all-reduce columns), and
what one message costs, from packing.
Walkthrough 09 measures the ring at 2, 3 and 4 workers on shaped links against the same
model.
"""),
        code("""
cluster.stop()
"""),
    ]
