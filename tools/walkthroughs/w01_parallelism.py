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
mathematics, and computes what each sends between devices per step.
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
the other is a memory copy. So the speeds below do not show that lesson (walkthrough 09
does, across emulated hosts): here splitting costs little. In three executions on this
2-core machine the split model ran at x0.84, x1.03 and x1.32 of the whole model's speed
(and under x0.6 once, in a test run sharing the machine with other work): the spread comes
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
        code("""
cluster.stop()
"""),
    ]
