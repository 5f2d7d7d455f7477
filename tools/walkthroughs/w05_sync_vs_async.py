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

Both take 600 steps of 128 examples: 76,800 examples each. Then, since TensorFlow's
runtime here leaves almost every asynchronous gradient fresh, the last section makes
gradients stale on purpose and measures what staleness costs, against a prediction.
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
**What it means.** With the same examples, the two reach the same accuracy band here: the
asynchronous run's gradients were hardly ever stale (notebook 02 measured how rarely on two
cores), so each update was as good as a synchronous one. Which one is faster per second
depends on the hardware: the synchronous run pays an all-reduce and a wait for the slower
worker every step; the asynchronous run pays the coordinator's scheduling and a round trip
to the PS for every variable read and update. Run this notebook on your own cluster to see
which wins there; notebook 09 slows one worker's link and shows the asynchronous run
going on without it.

## What stale gradients cost

The source documents credit synchronous training with better *gradient effectiveness*.
That is what stale gradients lose. On hardware where asynchronous workers overlap, a
worker's update lands after the updates the others made while it computed: with n equally
fast workers, n - 1 of them on average, so its gradient was computed for a model n - 1
versions old. TensorFlow's runtime on this machine serves one call's PS work at a time, so
the staleness it measures stays near 0 (02).

`train(strategy="single", gradient_delay=k)` makes the staleness exact instead: one
process, each update applying the gradients computed k steps before, the staleness of k + 1
equally fast asynchronous workers (the first k updates apply nothing). The same model at
the learning rate of the runs above (0.1), a batch of 32 and 600 steps, with delays of 0,
1, 3, 7 and 15 (1 to 16 workers' worth):
"""),
        code("""
import matplotlib.pyplot as plt

from workbench.common import costmodel

DELAYS = (0, 1, 3, 7, 15)
late = dict(model=wb.models.mlp((64, 32)), data=digits, strategy="single", global_batch_size=32, steps=600,
            seed=0, checkpoint_every=0, dashboard=False, anatomy=False, logs=False)


def last_loss(run):
    \"\"\"The training loss over the run's last 50 steps (inf if it diverged: its loss became NaN
    or infinite, which ends a run with an error saying so).\"\"\"
    try:
        run.wait()
    except wb.EngineError as e:
        if "FloatingPointError" not in str(e):
            raise
        return float("inf")
    return float(run.history.loss.iloc[-50:].mean())


delayed, ends = {}, {}
for k in DELAYS:  # one run at a time on a cluster
    delayed[k] = cluster.train(learning_rate=0.1, gradient_delay=k, **late)
    ends[k] = last_loss(delayed[k])
fig, ax = plt.subplots(figsize=(7, 3.4))
for k, run in delayed.items():
    h = run.history
    ax.plot(h.step * 32, h.loss.rolling(20, min_periods=1).mean(), label=f"delay {k}: as {k + 1} async workers")
ax.set(xlabel="examples used by updates", ylabel="training loss (20-step mean)", ylim=(0, 2.6),
       title="The same updates, applied k steps late (learning rate 0.1)")
ax.legend(fontsize=8)
plt.show()
pd.DataFrame({"loss, last 50 steps": ends,
              "test accuracy": {k: run.evaluation["test_accuracy"] for k, run in delayed.items()}}).rename_axis("delay").round(3)
""", volatile=True),
        code("""
accuracy = {k: round(run.evaluation["test_accuracy"], 3) for k, run in delayed.items()}
close = all(abs(accuracy[k] - accuracy[0]) <= 0.03 for k in (1, 3))
print(f"delays 1 and 3 learn as delay 0 does at rate 0.1, test accuracy within 0.03: {close} "
      f"(measured {accuracy[0]}, {accuracy[1]}, {accuracy[3]})")
print(f"delay 15 does not learn at rate 0.1, loss over its last 50 steps above 2.0 (ln 10 = 2.30 is a uniform "
      f"guess): {ends[15] > 2.0} (measured {ends[15]:.2f}, delay 0: {ends[0]:.2f})")
"""),
        md("""
Why a delay that changes nothing at one rate wrecks training at another: for gradient
descent on a quadratic of curvature L, applying each gradient k steps late is stable only
while the learning rate η satisfies η L < 2 sin(π / (4k + 2)) (the delay difference equation
x(t+1) = x(t) - a x(t-k) is stable for a < 2 sin(π / (4k + 2)); Levin and May, 1976). So
the largest learning rate that still learns should shrink from delay 0's by the factor
sin(π / (4k + 2)): at large k about π / (4k), close to the 1 / (k + 1) by which
staleness-aware asynchronous SGD (Zhang et al., 2016) divides its rate.

The prediction, then the measurement: for each delay, learning rates from 1.6 down by
factors of √2 until a run learns (its last 50 steps' loss below 2.0, under the uniform
guess's 2.30); the prediction is delay 0's measured rate times sin(π / (4k + 2))
(`costmodel.stale_rate(k)`).
"""),
        code("""
RATES = [round(1.6 * 2 ** (-j / 2), 4) for j in range(14)]
scans = {}
for k in DELAYS:
    tried = []
    for rate in RATES:
        tried.append((rate, last_loss(cluster.train(learning_rate=rate, gradient_delay=k, **late))))
        if tried[-1][1] < 2.0:
            break
    scans[k] = tried
largest = {k: tried[-1][0] if tried[-1][1] < 2.0 else float("nan") for k, tried in scans.items()}
stability = pd.DataFrame({
    "workers' staleness (k + 1)": {k: k + 1 for k in DELAYS},
    "sin(π/(4k+2))": {k: costmodel.stale_rate(k) for k in DELAYS},
    "1/(k+1)": {k: 1 / (k + 1) for k in DELAYS},
    "largest rate, predicted": {k: largest[0] * costmodel.stale_rate(k) for k in DELAYS},
    "largest rate, measured": largest,
    "runs tried": {k: len(tried) for k, tried in scans.items()},
}).rename_axis("delay k")
stability["measured / predicted"] = stability["largest rate, measured"] / stability["largest rate, predicted"]
stability.round(4)
""", volatile=True),
        code("""
first = {k: round(tried[0][1], 2) for k, tried in scans.items()}
print(f"the scan's first rate ({RATES[0]}) does not learn at any delay, losses above 2.0: "
      f"{all(v >= 2.0 for v in first.values())} (measured {list(first.values())})")
ratios = stability["measured / predicted"].iloc[1:].round(2).tolist()
print(f"each delay's largest learning rate within a factor 2 of the prediction (the scan's steps are √2): "
      f"{all(0.5 <= r <= 2 for r in ratios)} (measured / predicted {ratios} for delays {list(DELAYS[1:])})")
shrink = largest[0] / largest[15]
print(f"from delay 0 to delay 15 the largest learning rate shrinks at least 8x: {shrink >= 8} "
      f"(measured x{shrink:.0f}; predicted x{1 / costmodel.stale_rate(15):.0f})")

import matplotlib.pyplot as plt
import numpy as np

fig, ax = plt.subplots(figsize=(7, 3))
ks = np.arange(0, max(DELAYS) + 1)
ax.plot(ks, [largest[0] * costmodel.stale_rate(k) for k in ks], "-", color="#888",
        label="predicted: delay 0's rate x sin(π/(4k+2))")
for k, tried in scans.items():  # every rate tried: learned (filled) or not (open)
    for rate, loss in tried:
        ax.plot(k, rate, "o", color="#2471a3" if loss < 2.0 else "#c0392b", mfc="#2471a3" if loss < 2.0 else "none", ms=5)
ax.plot([], [], "o", color="#2471a3", label="a rate tried: learned")
ax.plot([], [], "o", color="#c0392b", mfc="none", label="a rate tried: did not learn")
ax.set(xlabel="gradient delay k", ylabel="learning rate", yscale="log",
       title="the largest rate that still learns, against the delay's stability bound")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
"""),
        md("""
**What it means.** Staleness is harmless while the learning rate sits well below what the
delay allows, and fatal above it: asynchronous training with n workers must run at about
1/n of the rate one worker could use, or its updates, each computed for a model n - 1
versions old, undo one another. Synchronous training applies every gradient to the model
it was computed on, at the full rate: that is its better gradient effectiveness. What the
asynchronous run buys with it is in 07 (a lost worker) and 09 (a slow link).
"""),
        code("""
cluster.stop()
"""),
    ]
