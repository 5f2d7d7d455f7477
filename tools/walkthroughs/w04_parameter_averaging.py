"""04: Deeplearning4j's synchronous parameter averaging, and its identity with big-batch SGD."""

from make_notebooks import code, md

NAME = "04_parameter_averaging"


def cells():
    return [
        md("""
# Parameter averaging (Deeplearning4j)

Deeplearning4j's Spark training is the simplest data parallelism there is:

1. initialise the parameters; 2. send a copy to each worker; 3. each trains on its own
subset of the data; 4. the global parameters become the **average** of the workers';
5. repeat.

Its blog makes a precise claim: averaging after **every** minibatch, with **plain SGD** and
the **same number of examples** `m` on each of `n` workers, is mathematically identical to
one machine training on minibatches of `n m` examples with the same learning rate:

$$W_{i+1} = \\frac{1}{n}\\sum_{w=1}^{n}\\Big(W_i - \\frac{\\alpha}{m}\\sum_{j \\in w} \\nabla L_j(W_i)\\Big)
= W_i - \\frac{\\alpha}{n m}\\sum_{j=1}^{n m} \\nabla L_j(W_i)$$

The workbench runs it as a strategy: `strategy="parameter_averaging", average_every=k`.
Each worker engine trains its own replica with no strategy at all; every `k` steps an
all-reduce replaces the replicas by their mean. This notebook verifies the claim to
float64 precision and measures how far the alternatives drift.
"""),
        code("""
import numpy as np
import pandas as pd
import workbench as wb

cluster = wb.Cluster(engines=3).start()  # 2 workers, and 1 engine for the one-machine runs
digits = wb.datasets.digits()
model = wb.models.mlp((64, 32), dtype="float64")  # float64: rounding far below what we measure
args = dict(model=model, data=digits, global_batch_size=128, steps=200, learning_rate=0.1, seed=0,
            checkpoint_every=0, dashboard=False)

def relative_difference(a, b):
    a, b = (np.concatenate([w.ravel() for w in ws]) for ws in (a, b))
    return np.linalg.norm(a - b) / np.linalg.norm(b)
"""),
        md("""
## The identity: k = 1, plain SGD, equal shards

Two workers with 64 examples each, averaged after every step, against one process with the
combined batches of 128 (the workers' shards interleave one seeded stream, so batch `s` is
the same 128 examples in both runs).
"""),
        code("""
single = cluster.train(strategy="single", workers=1, **args).wait()
averaged = cluster.train(strategy="parameter_averaging", workers=2, average_every=1, **args).wait()
identity = relative_difference(averaged.weights(), single.weights())
print(f"after 200 steps, relative difference of the weights: {identity:.1e}")
""", volatile=True),
        code("""
print(f"identical to float64 rounding (relative difference < 1e-12): {identity < 1e-12} (measured {identity:.1e})")
print(f"test accuracy, both: {single.evaluation['test_accuracy']:.3f} / {averaged.evaluation['test_accuracy']:.3f}")
"""),
        md("""
## Averaging less often

With `k > 1` each worker takes `k` steps on its own shard, each from its *own* parameters,
before they are averaged: the gradients are no longer taken at the common point `W_i`.
"""),
        code("""
drift = {}
for k in (2, 4, 8, 16):
    run = cluster.train(strategy="parameter_averaging", workers=2, average_every=k, **args).wait()
    drift[k] = {"relative difference from one machine": relative_difference(run.weights(), single.weights()),
                "test accuracy": run.evaluation["test_accuracy"]}
drift = pd.DataFrame(drift).T.rename_axis("average_every")
drift.style.format({"relative difference from one machine": "{:.2e}", "test accuracy": "{:.3f}"})
""", volatile=True),
        code("""
d = drift["relative difference from one machine"]
gap = abs(drift["test accuracy"] - single.evaluation["test_accuracy"]).max()
print(f"k >= 2 leaves the identity (every difference > 1e-3): {bool((d > 1e-3).all())} (measured min {d.min():.1e})")
print(f"averaging every 2 steps drifts less than every 8: {bool(d[2] < d[8])} (measured {d[2]:.1e} vs {d[8]:.1e})")
print(f"accuracy stays within 0.03 of one machine's: {bool(gap < 0.03)} (measured largest gap {gap:.3f})")
"""),
        md("""
## How far it drifts: second order in the learning rate

Why does averaging every `k` steps drift so little? Take one round of `k = 2` from a common
point `W`. Worker `w` takes its second step at its own `W - α g_w`, not at the big batch's
`W - α g`: a point `α (g - g_w)` away, where its gradient differs by the Hessian times that.
So the round ends away from the big batch's by a term in `α²`; for two workers
`α² (H_a - H_b)(g_a - g_b) / 4`, with `g_w` a worker's first gradient and `H_w` its
second batch's Hessian. There is no term in `α`: **halving the learning rate quarters one
round's drift**, whatever `k`. That is the prediction, for a network whose gradient is
smooth (tanh). ReLU's gradient jumps where a unit switches off, which a Taylor
expansion does not cover: its ratio is printed beside, not predicted.

One round of `k = 4` from the same start, at three learning rates:
"""),
        code("""
rounds = {}
for activation in ("tanh", "relu"):
    net = wb.models.mlp((64, 32), dtype="float64", activation=activation)
    for lr in (0.1, 0.05, 0.025):
        one_round = dict(args, model=net, steps=4, learning_rate=lr)
        one = cluster.train(strategy="single", workers=1, **one_round).wait()
        avg = cluster.train(strategy="parameter_averaging", workers=2, average_every=4, **one_round).wait()
        rounds[activation, lr] = relative_difference(avg.weights(), one.weights())
rounds = pd.Series(rounds).unstack(0)
rounds.rename_axis("learning rate").style.format("{:.2e}")
""", volatile=True),
        code("""
import matplotlib.pyplot as plt

lrs = list(rounds.index)  # 0.025, 0.05, 0.1
quartered = {a: rounds[a][lrs[1]] / rounds[a][lrs[0]] for a in rounds}  # halving the rate divides the drift by
print(f"tanh: halving the learning rate divides one round's drift by 4 (predicted), within 3.4-4.6: "
      f"{3.4 <= quartered['tanh'] <= 4.6} (measured {quartered['tanh']:.2f})")
print(f"relu, not predicted (its kinks): halving the learning rate divides the drift by "
      f"(measured {quartered['relu']:.1f})")
fig, ax = plt.subplots(figsize=(6, 3.4))
for a, color in (("tanh", "#2471a3"), ("relu", "#c0392b")):
    ax.plot(lrs, rounds[a], "o", color=color, label=f"{a}: measured")
grid = np.geomspace(lrs[0], lrs[-1], 20)
ax.plot(grid, rounds["tanh"][lrs[0]] * (grid / lrs[0]) ** 2, "--", color="#2471a3",
        label="predicted: α², through tanh's smallest rate")
ax.set(xscale="log", yscale="log", xlabel="learning rate α",
       ylabel="relative difference from one machine", title="one round of 4 local steps, 2 workers")
ax.set_xticks(lrs, [f"{x:g}" for x in lrs])
ax.set_xticks([], minor=True)
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
fig.tight_layout()
plt.show()
"""),
        md("""
## Momentum and Adam

The blog says "plain SGD, no momentum or other updater". Measured, the condition is
narrower than that: classical momentum is *linear* in the gradients, so workers that keep
their own velocity and average parameters every step still match one machine with
momentum, to rounding. Adam is not linear (it divides by a running root-mean-square of
each worker's own gradients), and there the identity breaks at once.
"""),
        code("""
results = {}
for name, extra in [("SGD + momentum 0.9", dict(momentum=0.9)),
                    ("Adam", dict(optimizer="adam", learning_rate=0.01))]:
    one = cluster.train(strategy="single", workers=1, **dict(args, **extra)).wait()
    avg = cluster.train(strategy="parameter_averaging", workers=2, average_every=1, **dict(args, **extra)).wait()
    results[name] = relative_difference(avg.weights(), one.weights())
pd.Series(results, name="relative difference, k = 1").map("{:.1e}".format)
""", volatile=True),
        code("""
momentum, adam = results["SGD + momentum 0.9"], results["Adam"]
print(f"momentum keeps the identity (< 1e-12): {momentum < 1e-12} (measured {momentum:.1e})")
print(f"Adam breaks it (> 1e-2): {adam > 1e-2} (measured {adam:.1e})")
# every run of this notebook against one machine: the identity's rounding, then what breaks it
bars = {"SGD, every step": identity, "momentum, every step": momentum,
        **{f"SGD, every {k} steps": d[k] for k in d.index}, "Adam, every step": adam}
fig, ax = plt.subplots(figsize=(7, 2.8))
ax.barh(list(bars), list(bars.values()), color=["#2471a3" if v < 1e-12 else "#c0392b" for v in bars.values()])
ax.axvline(1e-12, color="#555", ls="--", lw=1)
ax.text(1.3e-12, 0.5, "float64 rounding", fontsize=8, color="#555")
ax.set(xscale="log", xlabel="relative difference of the final weights from one machine's (measured)",
       title="2 workers averaging parameters against one machine at their whole batch")
ax.invert_yaxis()
fig.tight_layout()
plt.show()
"""),
        md("""
**What it means.** Averaging every step is exactly large-batch synchronous SGD, which is
why all-reduce of *gradients* (notebook 03) replaced it: it moves the same bytes and gives
the same model, without each worker needing an optimizer state of its own. Averaging every
`k` steps cuts communication by `k` and pays with a model that is no longer the big-batch
one. Here the weights end many orders of magnitude farther from it for every `k >= 2` than
the identity's rounding (the chart), while the test accuracy barely moves (the check above):
one round's drift is second order in the learning rate (measured above for tanh), so at the
small rates training ends with, averaging less often costs little.
"""),
        code("""
cluster.stop()
"""),
    ]
