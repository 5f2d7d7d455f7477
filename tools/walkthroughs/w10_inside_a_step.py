"""10: inside a step: where the time goes, and 32/16/8-bit gradient communication."""

from make_notebooks import code, md

NAME = "10_inside_a_step"


def cells():
    return [
        md("""
# Inside a step

The recipe for speed is to find the bottleneck first: is a step waiting for its data,
computing, moving gradients, or waiting for a slower peer? The workbench times the pieces of
every step where they run (`tf.timestamp` inside the step's own `tf.function`, chained to the
ops it brackets) and `run.anatomy()` gives each worker's share of wall time in

- **input** (waiting for the next batch), **compute** (forward, backward, local update),
- **communication** (the all-reduce; under a parameter server, the gradients' push),
- **waiting** (for a slower peer inside the all-reduce; idle between a PS worker's calls),
- **other** (Python between calls, publishing metrics, dispatch).

The dashboard draws the same shares as a stacked bar per worker while a run trains, and
names a straggler (a worker busy more than 20% longer per step than the others).
"""),
        code("""
import pandas as pd
import workbench as wb

cluster = wb.Cluster(engines=4).start()
digits = wb.datasets.digits()
args = dict(data=digits, global_batch_size=128, steps=300, learning_rate=0.1, seed=0,
            checkpoint_every=0, dashboard=False)
small, wide = wb.models.mlp((64, 32)), wb.models.mlp((512, 512))
runs = {
    ("MWMS", "small"): cluster.train(small, strategy="multi_worker_mirrored", workers=2, **args).wait(),
    ("MWMS", "wide"): cluster.train(wide, strategy="multi_worker_mirrored", workers=2, **args).wait(),
    ("PSS", "small"): cluster.train(small, strategy="parameter_server", workers=2, ps=1, **args).wait(),
    ("PSS", "wide"): cluster.train(wide, strategy="parameter_server", workers=2, ps=1, **args).wait(),
}
"""),
        md("""
## The anatomy of each run

One row per worker: mean wall time per step, the shares (they sum to 1), the bytes each
step hands to the all-reduce, and `busy_vs_others`: its busy time per step (wall minus
waiting) over the mean of its run's other workers', the number behind `anatomy()`'s
`straggler` flag (a straggler above 1.2).
"""),
        code("""
table = pd.concat({f"{s} {m}": r.anatomy() for (s, m), r in runs.items()}, names=["run"])
table["busy_vs_others"] = table.groupby(level="run").busy.transform(lambda b: b / ((b.sum() - b) / (len(b) - 1)))
table.drop(columns="straggler").round(3)
""", volatile=True),
        code("""
shares = table[["input", "compute", "communication", "waiting", "other"]].sum(axis=1)
print(f"shares sum to 1 for every worker: {bool((shares.round(6) == 1).all())} (measured largest |sum - 1| {(shares - 1).abs().max():.0e})")
params = {m: sum(w.size for w in runs[("MWMS", m)].weights()) for m in ("small", "wide")}
for m in ("small", "wide"):
    sent = runs[("MWMS", m)].history.comm_bytes
    print(f"MWMS {m}: {params[m]:,} parameters, bytes per step = 4 x parameters: {bool((sent == 4 * params[m]).all())} "
          f"(bytes per step seen: {', '.join(f'{b:,.0f}' for b in sent.unique())})")
ms = {k: 1e3 * (r.anatomy().compute * r.anatomy().step_time).mean() for k, r in runs.items()}
print(f"the wide model computes longer per step under MWMS: {ms[('MWMS', 'wide')] > ms[('MWMS', 'small')]} "
      f"(measured {ms[('MWMS', 'small')]:.2f} ms vs {ms[('MWMS', 'wide')]:.2f} ms)")
"""),
        code("""
# each share's range over the run's two workers, as the reading below quotes them
for run_name, g in table.groupby(level="run"):
    print(f"{run_name:11s}", "  ".join(f"{p} {g[p].min():.2f}-{g[p].max():.2f}"
                                       for p in ("input", "compute", "communication", "waiting", "other")))
""", volatile=True),
        md("""
**Reading it** (the ranges printed above, as this execution measured them). On two shared
cores the small model's MWMS step is about half all-reduce (communication), with some waiting
for the peer: its gradient is 26 kB, so the collective's fixed latency dominates, and
compute is a small share. The wide model hands the all-reduce 46 times the bytes and
computes many times longer per step, so its compute share grows several-fold. Under the
parameter server, compute is the largest share or near it (it includes the forward pass's
reads of variables held by the PS task), the gradients' push (communication) takes a
fifth to a quarter, and each worker sat idle between its calls (waiting) for a good part
of its wall time,
waiting for the single chief to schedule the next one (the coordinator is the bottleneck
here, as `DESIGN.md` measured).

## A profiler trace of a live run

`run.profile(steps=N)` asks every training task for a TF profiler trace of N steps while
the run goes on, writes it under the run directory (TensorBoard's profile plugin or XProf
open it) and summarises it by the same categories: seconds per step of op kernels.

A parameter-server step runs in a worker's `tf.distribute.Server` (a function the chief's
coordinator dispatches to it) and reads and updates variables on the PS task, so there the
trace is taken in the worker and PS engines' processes; the chief, which only dispatches,
is not traced.
"""),
        code("""
ps_live = cluster.train(small, strategy="parameter_server", workers=2, ps=1, **dict(args, steps=20000))
ps_trace = ps_live.profile(steps=100)
ps_live.stop()
ps_trace[["task", "steps", "input", "compute", "communication", "ops"]].round(5)
""", volatile=True),
        md("""
A worker's op kernels fit inside its timed step (compute and the gradients' push) but cover
only part of it: the step waits for the PS task's variables in asynchronous receives that
no op event spans, which the timers read and the trace cannot attribute. The PS task's
own ops are mostly sends of its variables to the workers.
"""),
        code("""
h = ps_live.history
for _, row in ps_trace.iterrows():
    if row.task.startswith("ps"):
        print(f"{row.task}: sends its variables to the workers: {row.communication > 0} "
              f"(measured {row.communication * 1e3:.3f} ms/step of send ops, {row.compute * 1e3:.3f} of compute)")
        continue
    steps = h[(h.worker == row.task) & h.step.between(row["first"], row["last"])]
    timed, traced = (steps.compute_time + steps.comm_time).mean(), row.compute + row.communication
    print(f"{row.task}: its op kernels fit inside its timed step: {traced <= timed} "
          f"(measured {traced / timed:.2f}: {traced * 1e3:.2f} of {timed * 1e3:.2f} ms/step)")
"""),
        md("""
Then an MWMS run, where every worker runs its steps in its own training task. TF's profiler
has a bug of its own here: now and then (about 1 trace in 27 on this machine, counted over
repeated traces outside this notebook; always the non-chief worker) the process crashes as
the trace stops. The run then fails with
`wb.ProfilerCrashed`, which says so; `resume()` continues the run and the cell traces it again.
"""),
        code("""
live = cluster.train(wide, strategy="multi_worker_mirrored", workers=2, **dict(args, steps=5000))
try:
    trace = live.profile(steps=50)
except wb.ProfilerCrashed as e:
    print(str(e).splitlines()[0])
    live = live.resume()
    trace = live.profile(steps=50)
live.stop()
trace[["task", "first", "last", "input", "compute", "communication", "ops"]].round(5)
""", volatile=True),
        md("""
The trace and the anatomy's timers measure the same steps two ways. The all-reduce's
kernels run inside the timed communication, which also holds the packing of the gradients
around them; the trace's compute also counts the loop's own bookkeeping (metrics, each
step's outputs), which the timers leave out.
"""),
        code("""
h = live.history
for _, row in trace.iterrows():
    steps = h[(h.worker == row.task) & h.step.between(row["first"], row["last"])]
    ratio = row.communication / steps.comm_time.mean()
    print(f"{row.task}: the trace's all-reduce time is within 0.4-1.1 of the timed communication: "
          f"{0.4 <= ratio <= 1.1} (measured {ratio:.2f}: {row.communication * 1e3:.2f} vs "
          f"{steps.comm_time.mean() * 1e3:.2f} ms/step)")
"""),
        md("""
## 32, 16 or 8 bits on the wire

TF's collectives have no compression of their own. `train(compression=...)` casts the
gradients to float16 or bfloat16 before the all-reduce and back after, or quantizes each
tensor to int8 with its own scale, feeding the rounding error into the next step (error
feedback), so that what is sent adds up to the true gradients over time. The bytes per
step are counted from the tensors actually handed to the collective.
"""),
        code("""
kinds = [None, "fp16", "bf16", "int8"]
comp = {k: cluster.train(wide, strategy="multi_worker_mirrored", workers=2, compression=k, eval_every=100,
                         **dict(args, checkpoint_every=0)).wait() for k in kinds}
full = comp[None].history.comm_bytes.iloc[-1]
pd.DataFrame({"bytes per step": {str(k): int(r.history.comm_bytes.iloc[-1]) for k, r in comp.items()},
              "of float32": {str(k): round(r.history.comm_bytes.iloc[-1] / full, 4) for k, r in comp.items()}})
"""),
        code("""
tensors = len(comp[None].weights())
fp16, int8, quarter = comp["fp16"].history.comm_bytes.iloc[-1], comp["int8"].history.comm_bytes.iloc[-1], -(-full // 16) * 4
print(f"fp16 sends exactly half: {fp16 * 2 == full} ({fp16:,.0f} of {full:,.0f} bytes)")
print(f"int8 sends a quarter plus a 4-byte scale per tensor: {int8 == quarter + 4 * tensors} "
      f"({int8:,.0f} bytes = {quarter:,.0f} + 4 x {tensors} tensors)")
base = comp[None].evaluation["test_accuracy"]
for k in kinds[1:]:
    acc = comp[k].evaluation["test_accuracy"]
    print(f"{k}: test accuracy within 0.02 of 32-bit: {abs(acc - base) <= 0.02} (measured {acc:.3f} vs {base:.3f})")

import matplotlib.pyplot as plt

predicted = {"float32": full, "fp16": full / 2, "bf16": full / 2, "int8": quarter + 4 * tensors}
measured = {name: comp[k].history.comm_bytes.iloc[-1] for name, k in zip(predicted, kinds)}
wb.predicted_vs_measured(list(predicted), list(predicted.values()), list(measured.values()), scale=1e3,
                         ylabel="KB per step", title="one step's gradients on the wire, by width",
                         predicted_label="predicted: S x bits / 32 (+ int8's scales)",
                         measured_label="measured: bytes handed to the all-reduce")
plt.show()
"""),
        code("""
wb.compare(*comp.values(), labels=["float32", "fp16", "bf16", "int8"])
""", volatile=True),
        md("""
**What it means.** Halving or quartering the bytes cost no accuracy you can see here (the
claims above). Whether it buys speed depends on the link: on loopback with 2 shared cores
the casts cost about as much as the bytes they save and the quantization more (the
comparison's steps/s above, one run each: they move from execution to execution). Where the transfer
itself is the cost, fewer bytes move faster: `bench/anatomy.py` measures each precision's
useful gradient bytes per second of all-reduce against 32 bits on the same engines
(`docs/performance.md` has the numbers).
"""),
        md("""
## Speed up one worker first: overlap its input

Before adding workers, make each one fast: a slow worker scaled out multiplies the waste.
The anatomy is the profile that says where to start. Here one process (`strategy="single"`)
reads batches from a `dataset_fn` whose augmentation costs about as much as the step's
compute (a little noise made by a chain of small matrix products per batch). Read
synchronously, the step waits for it: **input + compute**. With `Dataset.prefetch`, a
background thread makes the next batch while the step computes; perfect overlap leaves
**max(input, compute)**, the formula the references give for overlapping communication
with compute (claim 7 in `docs/teaching.md`). Overlap needs something to run on: the prefetch
thread takes a core the step's own ops would use, so on 2 shared cores the measured step
falls somewhere between the two predictions, and the share of the possible saving it
achieves is printed beside them. Each setting runs three times, alternated with the other,
and its median run is the one read: a run of 400 steps lasts about a second, and the
machine's other work can move one run alone.
"""),
        code("""
import numpy as np

x, y = digits.x_train.astype("float32"), digits.y_train

def pipeline(prefetch, work=16):
    def dataset_fn(input_context):
        import tensorflow as tf

        mix = tf.constant(np.random.RandomState(0).normal(size=(64, 64)).astype("float32") / 8)

        def augment(xb, yb):  # costly augmentation: a little structured noise for each batch
            noise = xb
            for _ in range(work):
                noise = tf.tanh(noise @ mix)
            return xb + 0.01 * noise, yb

        batch = input_context.get_per_replica_batch_size(128)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat()
        ds = ds.batch(batch, drop_remainder=True).map(augment)
        return ds.prefetch(2) if prefetch else ds
    return dataset_fn

one = dict(strategy="single", global_batch_size=128, steps=400, learning_rate=0.1, seed=0, checkpoint_every=0,
           dashboard=False)
feeds = {False: [], True: []}
for _ in range(3):  # alternated, 3 runs each: the machine's load drifts less between runs seconds apart
    for prefetch in (False, True):
        feeds[prefetch].append(cluster.train(wb.models.mlp((256, 256)), pipeline(prefetch), **one).wait())
parts_ms = {}  # each setting's median run (by step time): its step and its parts, ms (the anatomy's shares)
for p, runs in feeds.items():
    a = sorted((r.anatomy().iloc[0] for r in runs), key=lambda a: a.step_time)[1]
    m = parts_ms[p] = {name: share * a.step_time * 1e3 for name, share in
                       (("step", 1.0), ("input", a.input), ("compute", a.compute), ("other", 1 - a.input - a.compute))}
    print(f"prefetch={p}: step {m['step']:.2f} ms = input {m['input']:.2f} + compute {m['compute']:.2f} "
          f"+ other {m['other']:.2f} ms (the median of 3 runs' steps: "
          f"{', '.join(f'{r.anatomy().step_time.iloc[0] * 1e3:.2f}' for r in runs)} ms)")
""", volatile=True),
        code("""
import matplotlib.pyplot as plt
from workbench.common.costmodel import overlapped

# predicted from the run without prefetch (claim 7's formula: overlap 0 is the sum, 1 the max)
sync_read = parts_ms[False]
none, perfect = (overlapped(sync_read["compute"], sync_read["input"], k) + sync_read["other"] for k in (0, 1))
measured = parts_ms[True]["step"]
achieved = (none - measured) / (none - perfect)
print(f"the prefetched step lies between perfect overlap and none, max(input, compute) and their sum (+ the rest), "
      f"within 10%: {0.9 * perfect <= measured <= 1.1 * none} (measured {measured:.2f} ms, predicted "
      f"{perfect:.2f}-{none:.2f} ms: {achieved:.0%} of the possible saving, x{none / measured:.2f} "
      f"the steps/s)")
wait = parts_ms[True]["input"] / sync_read["input"]
print(f"prefetch hides at least a third of the step's wait for its batch: {wait <= 0.67} "
      f"(measured {wait:.2f} of the wait without it)")

fig, ax = plt.subplots(figsize=(7, 3))
rows = [("read synchronously, measured", parts_ms[False]), ("prefetched, measured", parts_ms[True])]
for i, (label, r) in enumerate(rows):
    left = 0.0
    for name, color in (("input", "#e67e22"), ("compute", "#2471a3"), ("other", "#bbb")):
        ax.barh(i, r[name], left=left, color=color, label=name if i == 0 else None)
        left += r[name]
ax.axvline(perfect, color="k", ls=":", label="predicted, perfect overlap")
ax.axvline(none, color="k", ls="--", label="predicted, no overlap")
ax.set(yticks=[0, 1], yticklabels=[label for label, _ in rows], xlabel="ms per step", title="one worker's step")
ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.42))  # under the chart
fig.tight_layout()
plt.show()
"""),
        md("""
The same formula, max against sum, decides whether a step's all-reduce costs anything: an
all-reduce that overlapped the backward pass would cost only what sticks out of it. TF's
collectives here start after the whole backward pass (the anatomy's communication follows
compute), so every byte's time adds to the step: walkthroughs 09 and 12 measure it.
"""),
        code("""
cluster.stop()
"""),
    ]
