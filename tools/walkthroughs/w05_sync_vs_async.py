"""05: synchronous vs asynchronous training, same model and budget."""

from make_notebooks import code, md

NAME = "05_sync_vs_async"


def cells():
    return [
        md("""
# Synchronous or asynchronous?

Google's experience (2016): synchronous training gives better *gradient effectiveness*
(every update uses fresh parameters), asynchronous training better *fault tolerance* and
no waiting for stragglers. Here both train the same model on the same data with the same
**budget of examples**, and we compare convergence per step and per second:

- **sync**: `multi_worker_mirrored`, 2 workers; each step processes a global batch of 128
  (64 per worker) and applies one update;
- **async**: `parameter_server`, 1 PS + 2 workers; each step is one worker's update from a
  batch of 128, applied as soon as it arrives.

Both take 600 steps of 128 examples: 76,800 examples each.
"""),
        code("""
import pandas as pd
import workbench as wb

cluster = wb.Cluster(engines=4).start()
digits = wb.datasets.digits()
args = dict(model=wb.models.mlp((64, 32)), data=digits, global_batch_size=128, steps=600,
            learning_rate=0.1, seed=0, eval_every=100, checkpoint_every=0, dashboard=False)
sync = cluster.train(strategy="multi_worker_mirrored", workers=2, **args).wait()
async_ = cluster.train(strategy="parameter_server", workers=2, ps=1, **args).wait()
"""),
        md("""
## Per step

Test accuracy every 100 steps. The synchronous run is deterministic (seeded, and every
update is the same computation each time); the asynchronous one depends on which worker's
update lands first, so its numbers change a little from run to run.
"""),
        code("""
pd.DataFrame({"sync": sync.evaluations.set_index("step").test_accuracy,
              "async": async_.evaluations.set_index("step").test_accuracy}).round(3)
""", volatile=True),
        code("""
print(f"sync, test accuracy after 600 steps: {sync.evaluation['test_accuracy']:.3f}")
gap = abs(async_.evaluation["test_accuracy"] - sync.evaluation["test_accuracy"])
print(f"async within 0.03 of sync: {gap < 0.03} (measured gap {gap:.3f})")
"""),
        md("""
## Per second

The same runs against wall time. `wb.compare` overlays the loss curves (against step and
against time) and tabulates throughput. On this 2-core machine the coordinator, the PS task
and both workers share two cores; on real hardware the balance changes, which is why the
workbench measures instead of assuming.
"""),
        code("""
wb.compare(sync, async_, labels=["sync (all-reduce)", "async (parameter server)"])
""", volatile=True),
        code("""
def seconds_to(run, accuracy=0.9):
    \"\"\"Seconds from the run's first step to the evaluation that first reached ``accuracy``.\"\"\"
    e = run.evaluations
    reached = e[e.test_accuracy >= accuracy]
    if reached.empty:
        return None
    h = run.history
    return round(float(h[h.step <= reached.step.iloc[0]].elapsed.max() - h.elapsed.min()), 2)

pd.Series({"sync": seconds_to(sync), "async": seconds_to(async_)}, name="seconds to 90% test accuracy")
""", volatile=True),
        md("""
**What it means.** With the same examples, the two reach the same accuracy band here: on
a small, well-conditioned problem staleness costs little (notebook 02 measured how rarely
it occurs on two cores). Which one is faster per second depends on the hardware: the
synchronous run pays an all-reduce and a wait for the slower worker every step; the
asynchronous run pays the coordinator's scheduling and a round trip to the PS for every
variable read and update. Run this notebook on your own cluster to see which wins there.
"""),
        code("""
cluster.stop()
"""),
    ]
