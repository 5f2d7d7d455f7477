"""02: Downpour-style asynchronous training with ParameterServerStrategy."""

from make_notebooks import code, md

NAME = "02_parameter_server"


def cells():
    return [
        md("""
# The parameter server: asynchronous data parallelism

In *Downpour SGD* (Dean et al., 2012) parameter-server tasks hold the model's variables,
possibly split into shards; workers each hold a replica of the computation, pull the
current variables, compute a gradient on their own batch and push the update back,
**without waiting for each other**. TensorFlow 2 does this with
`ParameterServerStrategy`: a *coordinator* (the chief) schedules steps on workers; the
variables live on PS tasks.

This notebook shows where the variables go, what one step costs a PS task, how that load
grows with workers, and what asynchrony does: *staleness*.
"""),
        code("""
import pandas as pd
import workbench as wb

cluster = wb.Cluster(engines=4).start()
digits = wb.datasets.digits()
model = wb.models.mlp((64, 32))
# 900 steps: runs under 1,000 steps loop 10 steps per scheduled call (see "Staleness" below)
args = dict(model=model, data=digits, strategy="parameter_server", global_batch_size=128,
            steps=900, learning_rate=0.05, checkpoint_every=0, dashboard=False)
"""),
        md("""
## One PS task, one worker

Three engines take the roles: the chief (coordinator), `ps:0` and `worker:0`. Every
variable lives on the PS task; the worker only computes.
"""),
        code("""
one = cluster.train(workers=1, ps=1, **args).wait()
p = one.placement
p[p.kind == "model"][["variable", "bytes", "device"]]
"""),
        code("""
accuracy = one.evaluation["test_accuracy"]
print(f"steps: {one.final_step}, test accuracy >= 0.90: {accuracy >= 0.90} (measured {accuracy:.3f})")
"""),
        md("""
## Variables spread over PS tasks

With two PS tasks the strategy places whole variables round-robin, in the order they are
created. Dense layers create a kernel, then a bias, so here *every kernel lands on* `ps:0`
and every bias on `ps:1`: 98% of the bytes (and of the traffic) on one task. A
`variable_partitioner` cuts large variables into shards instead; that needs a `tf.Module`
model such as `wb.models.module_mlp` (Keras 3 layers cannot take sharded variables). Cut
in two, every variable is spread evenly:
"""),
        code("""
two_ps = cluster.train(workers=1, ps=2, **args).wait()
p = two_ps.placement
v = p[p.kind == "model"]
v.assign(ps=v.task.map(lambda t: f"ps:{t}")).groupby("ps").bytes.sum().rename("bytes held")
"""),
        code("""
sharded = cluster.train(**dict(args, model=wb.models.module_mlp(64)), workers=1, ps=2, variable_partitioner=2).wait()
p = sharded.placement
v = p[p.kind == "model"]
v.assign(ps=v.task.map(lambda t: f"ps:{t}")).groupby("ps").bytes.sum().rename("bytes held, sharded")
"""),
        md("""
## The seeds' own code, today

The slides this walkthrough starts from (`seeds/001`) wrote distributed TensorFlow 1:
a `tf.train.ClusterSpec` naming every task, `tf.train.replica_device_setter` placing each
variable on a PS task round-robin and each op on the worker, and a
`tf.train.MonitoredTrainingSession` running the steps. That code still runs, under
`tf.compat.v1`. The cell below runs it as the slides wrote it (their two-layer network,
here on digits) in a separate Python process holding two PS servers and one worker
server, addressed on this machine's loopback, for 200 steps, and prints where each
variable went (about 10 s; TensorFlow's servers listen on every interface while they
live, as the workbench's own do, here for the seconds this process lasts):
"""),
        code(r"""
import subprocess
import sys

TF1 = r'''
import socket
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

v1 = tf.compat.v1
v1.disable_eager_execution()
ports = []
for _ in range(3):  # free ports on loopback
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        ports.append(probe.getsockname()[1])
cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"],
                                "worker": [f"127.0.0.1:{ports[2]}"]})
servers = [v1.train.Server(cluster, job_name="ps", task_index=i) for i in range(2)]
server = v1.train.Server(cluster, job_name="worker", task_index=0)

digits = load_digits()
x_all, y_all = (digits.data / 16).astype("float32"), digits.target.astype("int64")
v1.set_random_seed(0)
with v1.device(v1.train.replica_device_setter(worker_device="/job:worker/task:0", cluster=cluster)):
    x, labels = v1.placeholder(tf.float32, [None, 64]), v1.placeholder(tf.int64, [None])
    weights_1 = v1.Variable(v1.random_normal([64, 64], stddev=0.1), name="weights_1")
    biases_1 = v1.Variable(tf.zeros([64]), name="biases_1")
    weights_2 = v1.Variable(v1.random_normal([64, 10], stddev=0.1), name="weights_2")
    biases_2 = v1.Variable(tf.zeros([10]), name="biases_2")
    layer_1 = tf.nn.relu(tf.matmul(x, weights_1) + biases_1)
    logits = tf.matmul(layer_1, weights_2) + biases_2
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    global_step = v1.train.get_or_create_global_step()
    train_op = v1.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=global_step)
for v in (weights_1, biases_1, weights_2, biases_2, global_step):
    print(f"{v.op.name:12s} {v.device}")
print(f"{'the matmul':12s} {layer_1.op.device}")

losses, rng = [], np.random.RandomState(0)
with v1.train.MonitoredTrainingSession(master=server.target, is_chief=True,
                                       hooks=[v1.train.StopAtStepHook(last_step=200)]) as sess:
    while not sess.should_stop():
        i = rng.randint(0, len(x_all), 64)
        losses.append(sess.run([train_op, loss], feed_dict={x: x_all[i], labels: y_all[i]})[1])
print(f"steps: {len(losses)}, loss below a quarter of its first: {losses[-1] < losses[0] / 4} "
      f"(measured {losses[0]:.2f} -> {np.mean(losses[-10:]):.2f})")
'''
tf1 = subprocess.run([sys.executable, "-c", TF1], capture_output=True, text=True, timeout=300)
assert tf1.returncode == 0, tf1.stderr[-3000:]
print(tf1.stdout)
"""),
        md("""
The same rule as TensorFlow 2's `ParameterServerStrategy` in the two-PS run above:
variables go round-robin over the PS tasks in the order they are made, so each weight
matrix lands on `ps:0` and each bias on `ps:1` (the global step, made last, on `ps:0`),
while the ops run on the worker. Each TensorFlow 1 call has a TensorFlow 2 successor, and
the workbench makes those calls for you:

| TensorFlow 1 (the slides) | TensorFlow 2 | in the workbench |
| --- | --- | --- |
| `tf.train.ClusterSpec({...})` and a `tf.train.Server` per task | `TF_CONFIG` and `tf.distribute.Server` | `cluster.train(workers=..., ps=...)` places the tasks on engines and writes each one's `TF_CONFIG` |
| `tf.train.replica_device_setter(...)` | `ParameterServerStrategy(variable_partitioner=...)` | `strategy="parameter_server"`, `variable_partitioner=k` |
| `tf.train.MonitoredTrainingSession(master=..., is_chief=...)` | `ClusterCoordinator.schedule(...)` on the chief, `tf.train.CheckpointManager` | the chief engine's loop: steps, checkpoints, evaluation, stop |
| `with tf.device("/job:ps/task:0")` (model parallelism) | `with tf.device(...)` inside a `tf.function` | no strategy of its own: `01_data_vs_model_parallelism` |
"""),
        md("""
## Memory per parameter

The references count what one parameter costs in training, in fp32: 4 bytes for the
weight, 4 for its gradient, and the optimizer's state: none for plain SGD, 4 for momentum's
velocity, 8 for Adam's two moments. That is 8, 12 and 16 bytes per parameter. The weight
and the optimizer's state persist between steps, and a parameter-server run keeps both on
its PS tasks: 4, 8 and 12 bytes. The gradient lives on a worker only during its step: it
is what crosses the link, counted in the next section. With a partitioner, each of k PS
tasks should hold 1/k of those bytes.

The placement records the bytes of every variable where it lives, optimizer state
included. Three short runs of the sharded model measure them, one per optimizer (20 steps each):
"""),
        code("""
def persistent_bytes(optimizer, momentum=0.0):
    r = cluster.train(**dict(args, model=wb.models.module_mlp(64), steps=20), workers=1, ps=2,
                      variable_partitioner=2, optimizer=optimizer, momentum=momentum).wait()
    v = r.placement[r.placement.variable.notna()]
    params = v[v.kind == "model"].bytes.sum() / 4  # fp32 weights
    per_ps = v.groupby("task").bytes.sum()
    return params, v.bytes.sum() / params, per_ps.max() / per_ps.sum()

rows = []
for label, optimizer, momentum, state in [("plain SGD", "sgd", 0.0, 0), ("SGD, momentum 0.9", "sgd", 0.9, 4),
                                          ("Adam", "adam", 0.0, 8)]:
    params, measured, largest = persistent_bytes(optimizer, momentum)
    rows.append({"optimizer": label, "parameters": int(params),
                 "references' bytes/param (+ gradient)": 4 + 4 + state,
                 "predicted on the PS tasks": 4 + state, "measured on the PS tasks": round(measured, 3),
                 "measured / predicted": round(measured / (4 + state), 4),
                 "largest PS task's share (predicted 1/2)": round(largest, 3)})
memory = pd.DataFrame(rows).set_index("optimizer")
memory
"""),
        code("""
import matplotlib.pyplot as plt
import numpy as np

for label, row in memory.iterrows():
    print(wb.within(row["measured / predicted"], 0.99, 1.01, f"{label}: bytes per parameter held, measured / predicted"))
    print(wb.within(row["largest PS task's share (predicted 1/2)"], 0.45, 0.55, f"{label}: the largest PS task's share"))
fig, ax = plt.subplots(figsize=(7, 3.2))
x = np.arange(len(memory))
ax.hlines(memory["references' bytes/param (+ gradient)"], x - 0.4, x + 0.4, color="k",
          label="the references' count, with the gradient's 4")
wb.predicted_vs_measured(memory.index, memory["predicted on the PS tasks"], memory["measured on the PS tasks"], ax=ax,
                         ylabel="bytes per parameter", title="what the PS tasks hold, per parameter",
                         predicted_label="predicted: 4 + the optimizer's state",
                         measured_label="measured: the placement's bytes")
plt.show()
"""),
        md("""
The few bytes above the prediction are the optimizer's own counters (its step count, an
int64), which do not grow with the model. The 4 bytes of each gradient never appear in
the placement: a worker makes them during its step and sends them to the PS tasks, which
apply them and keep nothing.
"""),
        md("""
## What a step costs the PS tasks

Each worker step reads every variable from the PS tasks and sends every gradient back:
`2 x parameters x 4 bytes`, whatever the number of workers. So the PS tasks' traffic is
that figure times the steps per second of **all** workers together: it grows with every
worker added, which is why Downpour shards parameters over many PS tasks.
"""),
        code("""
params = 64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10
per_step = 2 * params * 4
print(f"{params} parameters: {per_step} bytes through the PS tasks per worker step")
pd.DataFrame({"workers": [1, 2, 4, 8, 16], "PS bytes per round of steps": [w * per_step for w in (1, 2, 4, 8, 16)]}).set_index("workers")
"""),
        md("""
Now two workers, with the live dashboard: loss per worker, each worker's throughput, and
the placement picture with the PS task holding every variable. When the run ends the cell
keeps a static rendering of it.
"""),
        code("""
two = cluster.train(workers=2, ps=1, **dict(args, dashboard=True))
two.wait()
""", volatile=True),
        md("""
Measured here, two workers against one (steps/s as the dashboard and `wb.compare` count
them). These numbers change from run to run, and two workers do not make twice the steps
per second of one, often not even more: on 2 cores the workers, the PS task and the
coordinator share the same cores, and TensorFlow mostly ran one scheduled call's PS work at
a time (below).
"""),
        code("""
rates = wb.compare(one, two, labels=["1 worker", "2 workers"]).table[["steps/s"]]  # the dashboard's figure
rates.assign(**{"PS MB/s": rates["steps/s"] * per_step / 1e6}).round(1)
""", volatile=True),
        md("""
## Staleness

A worker's gradient is computed on the variables as they were when its step began; by the
time it is applied, other workers may have updated them. The workbench measures this for
every step of a parameter-server run: `history.staleness` is the number of other workers'
updates applied to the PS variables between the step's read of the global step counter
(when the step starts) and its own update (when it ends). 0 means the gradient was applied
to the very variables it was computed on; 2 means two other updates landed in between, so
it was computed for a model two versions old. With one worker it is always 0.

On this runtime most steps are fresh. The coordinator hands each worker a call of several
steps, and TensorFlow ran the PS side of one call (its reads and its updates) mostly before
the next one's, whichever worker it came from. (A plain TensorFlow probe, not part of this
notebook, measured that on this machine: two workers each doing 20 matrix products between
reading a counter on the PS and updating it; none of its calls saw another's update.) Other
updates slip in only between the steps of a call looped in a `tf.while_loop` (what a run
under 1,000 steps does, 10 steps a call): a few percent of the steps at most, and whether
any at all depends on how the cores are shared (the check below allows 10%). Runs of
1,000 steps or more unroll 20 steps a call, and there fewer slip in, mostly as a whole
5-step piece of another call. The table counts the two-worker run's steps by staleness:
"""),
        code("""
print(f"one worker, every step fresh: {(one.history.staleness == 0).all()} "
      f"(largest staleness {one.history.staleness.max()} in {len(one.history)} steps)")
"""),
        code("""
two.history.staleness.value_counts().sort_index().rename("steps").to_frame().T
""", volatile=True),
        code("""
stale = int((two.history.staleness > 0).sum())
print(f"two workers, most steps fresh (at least 90%): {stale <= 90} (measured {stale} of 900 stale, "
      f"mean staleness {two.history.staleness.mean():.3f})")
"""),
        md("""
Stale gradients are why asynchronous training converges less per step than synchronous
training with the same examples: each update was computed for a model that no longer
exists. Here both runs still reach the same accuracy band: a few percent of steps or fewer, nearly
all one version old, cost a small MLP nothing measurable. With many workers, slow networks,
stragglers, or a PS runtime that serves calls concurrently, it grows, and learning rates
must shrink; that is the price paid for never waiting on the slowest worker (see
`05_sync_vs_async`).
"""),
        code("""
accuracy = two.evaluation["test_accuracy"]
print(f"two workers, test accuracy >= 0.90: {accuracy >= 0.90} (measured {accuracy:.3f})")
steps = two.history.step
print(f"every one of the 900 steps done once: {sorted(steps) == list(range(1, 901))} "
      f"({len(steps)} reports of {steps.nunique()} steps, {steps.min()}-{steps.max()})")
"""),
        code("""
print("steps per worker:", two.history.groupby("worker").size().to_dict())
""", volatile=True),
        code("""
cluster.stop()
"""),
    ]
