"""00: from nothing to a live distributed run in a few cells."""

from make_notebooks import code, md

NAME = "00_quickstart"


def cells():
    return [
        md("""
# Quickstart: from nothing to a distributed training run

The workbench runs TensorFlow's `tf.distribute` strategies on
[ipyparallel](https://ipyparallel.readthedocs.io) engines: separate processes that
this notebook starts, drives and watches. The notebook itself never imports TensorFlow.

**1. Start a local cluster.** `wb.Cluster(engines=3)` starts an ipyparallel controller and
three engines on this machine, in the workbench's own IPython profile. Each engine
reports its host, the address its peers can reach it on, its PID, a port reserved for its
TensorFlow server, and its GPUs (none here).
"""),
        code("""
import sys
import workbench as wb

cluster = wb.Cluster(engines=3).start()
print("TensorFlow modules imported in this notebook:", sum(name.split(".")[0] == "tensorflow" for name in sys.modules))
"""),
        code("""
cluster.engines  # PIDs and ports differ on every run: nbval does not compare this output
""", volatile=True),
        md("""
**2. Train with synchronous all-reduce.** `MultiWorkerMirroredStrategy` on two engines:
each worker holds a full replica of the model, trains on its own shard of every global
batch, and the gradients are summed by all-reduce before each update.
`wb.datasets.digits()` is scikit-learn's bundled handwritten digits (real data, no
download). `cluster.train` returns at once; `run.wait()` blocks until it is done.
"""),
        code("""
digits = wb.datasets.digits()
digits
"""),
        code("""
run = cluster.train(
    model=wb.models.mlp(hidden=(64, 32)),
    data=digits,
    strategy="multi_worker_mirrored", workers=2,
    global_batch_size=128, steps=3000, learning_rate=0.1, seed=0,
)
""", volatile=True),
        md("""
The cell above returned at once and shows the live dashboard: loss per worker and the
smoothed global loss (against step or wall time), throughput per worker, where every
task and variable lives, and a Stop button. The kernel stays free meanwhile.
`run.wait()` blocks until the run is done (and raises the engines' error, if any).
"""),
        code("""
run.wait()
print(f"steps: {run.final_step}, test accuracy: {run.evaluation['test_accuracy']:.3f}")
"""),
        md("""
`run.history` grows while the run trains: one row per worker and step, with the loss and
accuracy of that worker's own half of the global batch. Their mean is the loss of the
whole batch, the number every replica's update was computed from. The run is seeded and
synchronous, so the same numbers come back every time this notebook runs.
"""),
        code("""
h = run.history
h[["step", "worker", "loss", "accuracy"]].round(4).tail(4)
"""),
        code("""
h.groupby("step").loss.mean().round(4).tail(2)  # the global batch's loss
"""),
        md("""
`run.placement` says where every variable lives: under MultiWorkerMirroredStrategy each
worker holds a mirrored copy of every variable.
"""),
        code("""
p = run.placement
p[p.kind == "model"][["role", "task", "device", "variable", "shape", "bytes"]]
"""),
        md("""
**3. Train asynchronously with a parameter server.** `ParameterServerStrategy` needs a
chief (the coordinator that schedules steps), PS tasks that hold the variables, and
workers that compute. With three engines: 1 chief + 1 PS + 1 worker. The cluster
restarts the engines whose TensorFlow state the new topology cannot reuse. The run takes
the same steps, global batch, learning rate and seed as the all-reduce run above, so
that the two compare on equal terms.
"""),
        code("""
ps_run = cluster.train(
    model=wb.models.mlp(hidden=(64, 32)), data=digits,
    strategy="parameter_server", workers=1, ps=1,
    global_batch_size=128, steps=3000, learning_rate=0.1, seed=0, eval_every=500,
)
""", volatile=True),
        md("""
Asynchronous training has no global step that all workers share: each step is one
worker's update, applied to the variables on the PS task as soon as it arrives. The
dashboard's placement view shows the PS task holding every variable. Press **Stop** to end
the run early: the coordinator stops scheduling steps, and a checkpoint is saved. (While a
cell waits in `run.wait()` the kernel is busy and cannot handle the button: interrupt the
kernel instead, which stops the run the same way.)
"""),
        code("""
ps_run.wait()
accuracy = ps_run.evaluation["test_accuracy"]
print(f"test accuracy >= 0.90: {accuracy >= 0.90} (measured {accuracy:.3f})")
p = ps_run.placement
p[p.kind == "model"][["role", "task", "variable", "bytes"]]
"""),
        md("""
**Compare the two runs.** Both saw the same examples: as many steps of as many
examples, at the same learning rate. With a single worker, asynchronous training has no
one to be out of step with: each update is computed from the variables the last one left,
as under all-reduce, where the two workers' halves of a batch make one gradient. So the
two runs should end at the same loss; what differs is how long they took. `wb.compare`
overlays their loss against step and against wall time, and tabulates their throughput:
the view for choosing a strategy. (On two CPU cores neither distributed run beats one
process; the walkthroughs measure why.)
"""),
        code("""
terms = {k: (getattr(run.job, k), getattr(ps_run.job, k)) for k in ("steps", "global_batch_size", "learning_rate", "seed")}
print("the same steps, global batch, learning rate and seed:", all(a == b for a, b in terms.values()), terms)
losses = [r.evaluation["test_loss"] for r in (run, ps_run)]
print(f"one parameter-server worker takes the ring's steps: test losses within 5% of each other: "
      f"{abs(losses[0] / losses[1] - 1) <= 0.05} (measured {losses[0]:.4f} and {losses[1]:.4f})")
"""),
        code("""
wb.compare(run, ps_run, labels=["all-reduce, 2 workers", "parameter server, 1 worker"])
""", volatile=True),
        md("""
**4. Stop the cluster.** This ends the controller and every engine (and with them the
TensorFlow servers). A cluster also stops when the kernel exits.
"""),
        code("""
cluster.stop()
cluster
"""),
    ]
