"""01: data parallelism vs model parallelism, and the traffic each split creates."""

from make_notebooks import code, md

NAME = "01_data_vs_model_parallelism"


def cells():
    return [
        md("""
# Data parallelism and model parallelism

There are two ways to split the work of training one model (Dean et al., *Large Scale
Distributed Deep Networks*, 2012):

- **Data parallelism**: every device holds a full replica of the model and trains on its
  own part of each batch; the replicas' gradients are combined (summed) before each update.
- **Model parallelism**: the model itself is cut into pieces placed on different devices;
  each batch flows through all of them. Every edge the cut crosses becomes traffic between
  devices, each step, forward and backward.

This notebook runs both on one engine whose CPU is split into two *logical* devices,
standing in for two GPUs (there are none here), checks that neither changes the
mathematics, and computes what each sends between devices per step; then it splits the
model across emulated hosts, where the cut's bytes cross a 20 Mbit/s network, and measures
them on the links.
"""),
        code("""
import numpy as np
import pandas as pd
import workbench as wb

cluster = wb.Cluster(engines=1).start()
digits = wb.datasets.digits()
HIDDEN = (64, 32)
args = dict(data=digits, workers=1, devices=2, global_batch_size=128, steps=300,
            learning_rate=0.1, seed=0, checkpoint_every=0, dashboard=False)
"""),
        md("""
## Data parallelism: a replica per device

`strategy="mirrored", devices=2` runs TensorFlow's `MirroredStrategy` over the two logical
devices: each replica gets 64 of the 128 examples of a batch, and the gradients are
all-reduced before the (identical) update of both replicas.
"""),
        code("""
data_parallel = cluster.train(model=wb.models.mlp(HIDDEN), strategy="mirrored", **args).wait()
p = data_parallel.placement
print("devices of the task:", p.device[0])
print(f"test accuracy: {data_parallel.evaluation['test_accuracy']:.2f}")
"""),
        md("""
## Model parallelism: layers on different devices

`wb.models.split_mlp(HIDDEN, devices=2)` is the same MLP with its layers cut into two
consecutive stages, each stage's variables *and* computation pinned to one device with
`tf.device(...)`, exactly as DistBelief-era TensorFlow placed sub-graphs
(`with tf.device("/job:worker/task:1/device:gpu:0")`). It trains as one process
(`strategy="single"`), the devices passing activations forward and gradients back.
"""),
        code("""
model_parallel = cluster.train(model=wb.models.split_mlp(HIDDEN, devices=2), strategy="single", **args).wait()
p = model_parallel.placement
p[p.kind == "model"][["variable", "shape", "bytes", "device"]]
"""),
        md("""
**Claim: placement changes where the work happens, not the numbers.** The same seeded MLP
trained on one device gives the same weights as the split one (up to float32 rounding).
"""),
        code("""
whole = cluster.train(model=wb.models.mlp(HIDDEN), strategy="single", **dict(args, devices=0)).wait()

def relative_difference(a, b):
    a, b = (np.concatenate([w.ravel() for w in ws]).astype("float64") for ws in (a, b))
    return np.linalg.norm(a - b) / np.linalg.norm(b)

split = relative_difference(model_parallel.weights(), whole.weights())
replicas = relative_difference(data_parallel.weights(), whole.weights())
print(f"split vs whole, relative difference < 1e-6: {split < 1e-6} (measured {split:.1e})")
print(f"data parallel vs whole, relative difference < 1e-5: {replicas < 1e-5} (measured {replicas:.1e})")
"""),
        md("""
## The traffic each split creates

Per training step:

- **Model parallelism** sends, across each cut, the activations of the cut layer forward
  and their gradients back: `2 x batch x width x 4 bytes` (float32). It grows with the
  batch and with the width of the layer you cut at, not with the number of parameters.
- **Data parallelism** all-reduces one gradient per parameter. With a ring over `n`
  devices each device sends `2 (n-1)/n x parameters x 4 bytes`, whatever the batch.

For this MLP (64 inputs, 64-32 hidden, 10 outputs):
"""),
        code("""
widths = (64,) + HIDDEN + (10,)
params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
cut = HIDDEN[-1]  # split_mlp cut this model after its second hidden layer (32 wide)
rows = []
for batch in (32, 128, 512, 2048):
    rows.append({"global batch": batch,
                 "model ∥, cut at 32 wide": 2 * batch * cut * 4,
                 "model ∥, cut at 64 wide": 2 * batch * 64 * 4,
                 "data ∥, 2 devices (each)": 2 * (2 - 1) * params * 4 // 2})
print("parameters:", params, "| bytes per step:")
pd.DataFrame(rows).set_index("global batch")
"""),
        md("""
For this model data parallelism sends less than the 32-wide cut from a global batch of
about 100 up (26,280 bytes against 256 bytes per example). A small model with large
batches favours data parallelism; a model too large for one
device, with narrow places to cut, favours model parallelism. The cut matters as much as
the choice: cutting at the 64-wide layer doubles the traffic of cutting at the 32-wide one.
*A bad split floods the network.* On one machine there is no network to flood: the two
logical devices share the same two cores and memory, and handing activations from one to
the other is a memory copy. So the speeds below do not show that lesson (the last section
does, across emulated hosts): here splitting costs little. From execution to execution on
this 2-core machine the split model's speed moved both sides of the whole model's (from
under x0.6, in a test run sharing the machine with other work, to above x1.3): the spread comes
from the machine's load and from how TensorFlow's runtime spreads two logical devices over
two cores, not from communication. So the ratio below is shown, not checked: a speed
measured on a shared machine is no claim (`bench/` measures speeds, against baselines run
alongside).
"""),
        code("""
speed = {name: run.history.examples_per_s.median() for name, run in
         [("one device", whole), ("data parallel (2 replicas)", data_parallel),
          ("model parallel (2 stages)", model_parallel)]}
pd.Series(speed, name="examples/s (median of steps)").round(0)
""", volatile=True),
        code("""
ratio = speed["model parallel (2 stages)"] / speed["one device"]
print(f"model parallel / one device's speed: x{ratio:.2f}")
""", volatile=True),
        md("""
## Across hosts: a bad split floods the network

On hosts of their own the cut's traffic crosses a network. `strategy="model_parallel"`
puts stage i of a `split_mlp` on worker engine i (its variables and ops on
`/job:worker/task:i`); the workers only serve TensorFlow's gRPC runtime, and a chief engine
connects to them and runs each step, the activations crossing straight from one worker to
the next and their gradients back. Three emulated hosts (walkthrough 08; they need root):
the chief on one, each stage on another, every link at 20 Mbit/s.

One MLP, 64-256-16-10, cut in two places: after its 16-wide layer (**narrow**) and after
its 256-wide one (**wide**). The same layers, the same arithmetic, 16 times the bytes
across the cut: `2 x batch x width x 4` a step, as the table above computes. Beside each
run, `run.explain()`'s model (`workbench/common/costmodel.py`): the stages compute one
after the other, and each cut's activations, then their gradients, cross from one stage's
host to the next (out of one host's link, into the other's), forward, then back.
"""),
        code("""
import warnings

try:
    bed = wb.testbed(hosts=3, link="20mbit")
except wb.TestbedError as e:
    bed = None
    print("No emulated hosts here:", e)
else:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TF's servers on the bed's network: expected
        hosts = wb.Cluster(**bed.ssh_cluster(1), timeout=180).start()
    print("hosts:", list(bed.hosts), "| links:", bed.links)
""", volatile=True),
        code("""
CUT = dict(narrow=(0, 0, 1), wide=(0, 1, 1))  # the stage of each layer: 256-wide, 16-wide, output
BATCH = 64


def across(stages, steps):
    \"\"\"A split run on the bed, and what its links and the model say about it.\"\"\"
    model = wb.models.split_mlp((256, 16), devices=2, stages=stages)
    run = hosts.train(model, digits, strategy="model_parallel", workers=2, global_batch_size=BATCH, steps=steps,
                      learning_rate=0.1, seed=0, checkpoint_every=0, dashboard=False).wait()
    table = run.explain().table.set_index("figure")
    stage_hosts = [t.host for t in run.tasks if t.role == "worker"]
    sent = [table.loc[f"{h} link bytes sent per step", "measured"] for h in stage_hosts]
    use = [table.loc[f"{h} link use", "measured"] for h in stage_hosts]
    width = model.cut_widths()[0]
    explained = run.explain()
    return dict(run=run, width=width, one_way=BATCH * width * 4, sent=float(np.mean(sent)), link_use=max(use),
                handed=int(run.history.comm_bytes.iloc[-1]), steps_per_s=table.loc["steps/s", "measured"],
                predicted=table.loc["steps/s", "predicted"], bottleneck=explained.prediction["bottleneck"],
                why=explained.sentence, stage_hosts=stage_hosts)


if bed is not None:
    cuts = {name: across(stages, 150) for name, stages in CUT.items()}  # the same steps: the same weights
    for name, r in cuts.items():
        print(f"{name:6s} cut {r['width']:3d} wide: activations one way {r['one_way']:6,} B | each stage's host sent "
              f"{r['sent']:8,.0f} B a step | handed across (comm_bytes, both ways) {r['handed']:7,} B | "
              f"steps/s {r['steps_per_s']:6.1f} (predicted {r['predicted']:6.1f}) | link use {r['link_use']:.2f}")
        print("       run.explain():", r["why"])
""", volatile=True),
        code("""
if bed is not None:
    narrow, wide = cuts["narrow"], cuts["wide"]
    same = relative_difference(narrow["run"].weights(), wide["run"].weights())
    print(f"both cuts train the same weights (relative difference < 1e-6): {same < 1e-6} (measured {same:.1e})")
    over = wide["sent"] / wide["one_way"]
    print(f"a wide stage's host sends its cut's batch x width x 4 bytes a step, 1.0-1.25x of it with the "
          f"headers and the step's requests: {1.0 <= over <= 1.25} (measured x{over:.2f})")
    slope = (wide["sent"] - narrow["sent"]) / (wide["one_way"] - narrow["one_way"])
    print(f"what the cut adds grows as batch x width x 4: wide minus narrow, per byte of the formula's "
          f"difference, 0.95-1.2: {0.95 <= slope <= 1.2} (measured x{slope:.2f})")
    slower = narrow["steps_per_s"] / wide["steps_per_s"]
    print(f"the wide cut floods the 20 Mbit links: >= 4x fewer steps/s than the narrow one: {slower >= 4} "
          f"(measured x{slower:.1f})")
    ratio = wide["steps_per_s"] / wide["predicted"]
    print(f"the wide cut's steps/s, measured / predicted (run.explain()), 0.8-1.25: {0.8 <= ratio <= 1.25} "
          f"(measured {ratio:.2f})")
    print(f"its links are busy each way at most 0.65 of the time (forward, then backward): "
          f"{wide['link_use'] <= 0.65} (measured {wide['link_use']:.2f})")
    kind, _, host = wide["bottleneck"].partition(": ")
    stage = next((t.name for t in wide["run"].tasks if t.host == host), host)  # hosts are named at random
    print(f"run.explain() names a stage's link the wide cut's bottleneck: {kind == 'network' and host in wide['stage_hosts']} "
          f"({kind}: the link of {stage if host not in wide['stage_hosts'] else 'a stage'})")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    wb.predicted_vs_measured([f"{c} cut ({cuts[c]['width']} wide)" for c in CUT], [cuts[c]["one_way"] for c in CUT],
                             [cuts[c]["sent"] for c in CUT], ax=left, scale=1e3, ylabel="KB sent per step",
                             title="bytes across the cut", predicted_label="predicted: batch x width x 4",
                             measured_label="measured: a stage host's link")
    wb.predicted_vs_measured([f"{c} cut" for c in CUT], [cuts[c]["predicted"] for c in CUT],
                             [cuts[c]["steps_per_s"] for c in CUT], ax=right, ylabel="steps/s",
                             title="20 Mbit links: steps/s", predicted_label="predicted (run.explain())")
    plt.show()
"""),
        md("""
- **The wide cut is what floods.** Each of its steps moves 64 x 256 x 4 = 65,536 bytes of
  activations one way and as many gradient bytes back, against 4,096 for the narrow cut:
  the links, not the 2 cores, then set the pace, and `run.explain()` names them the
  bottleneck. The model's prediction for it is the stages' measured compute plus each
  transfer's bytes over the link's payload rate plus a latency each.
- **Each step also pays a toll.** Every step's tensors are fetched by a request
  (TensorFlow's `RecvTensor` over gRPC), a fixed cost a step, and every frame carries
  headers, about 4.6% of its payload (1,448 bytes in a 1,514-byte frame) with the other
  way's acknowledgements besides: a host's link counts more than the tensors, a larger
  share of the narrow cut's few bytes than of the wide cut's (both printed above). The
  fixed part cancels in the difference between the two cuts, which follows the formula
  but for the headers.
- **Half of each link stays idle.** The forward pass waits for the activations and the
  backward pass for their gradients: each link carries one way while the other way is
  idle, and then the reverse. Pipelining micro-batches (GPipe) keeps both ways busy; the
  workbench's steps are not pipelined.
- **Where the model is not checked:** the narrow cut moves 4 KB a transfer, of which the
  emulated link lets one frame plus 500 us of traffic through at line speed
  (`workbench/kernel/testbed/links.py`), and the model's time for it is mostly the latency
  it assumes per message, TensorFlow's collectives' 2 ms: too much for a `RecvTensor` on
  the bed (a 1-byte TCP message between its hosts takes about 0.2 ms, `bench/README.md`;
  the request's own cost is not measured apart). Its measured / predicted is printed
  above and drawn on the right, not claimed: on a machine with cores to spare it runs
  well ahead of the prediction. `wb.calibrate_links(cluster)` measures this machine's
  latency for the model (walkthrough 12 uses it).
- **The narrow cut's links are busy too:** it sends a fraction of the wide cut's bytes a
  step but makes many times its steps, and requests and headers are a large share of what
  it sends; its link use is printed above.
"""),
        code("""
if bed is not None:
    hosts.stop()
    bed.close()
cluster.stop()
"""),
    ]
