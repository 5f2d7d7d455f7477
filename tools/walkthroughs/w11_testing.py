"""11: your own distributed notebook as a test: what nbval compares, what it sanitizes, how
to tag a cell, the CI workflow to copy."""

from make_notebooks import code, md

NAME = "11_test_your_notebook"


def cells():
    return [
        md("""
# Test your own distributed notebook

This notebook is a test. Saved with its outputs, `pytest --nbval` re-executes it and
compares every cell's new outputs with the saved ones; the workbench's pytest plugin, which
comes with the package, makes that work for runs on engines: timings, PIDs and speeds are
sanitized, the numbers that teach are compared. Nothing in it is tagged except one cell, to
show how. `docs/testing.md` has the whole story.

```bash
python -m pytest --nbval notebooks/11_test_your_notebook.ipynb
```

**A run whose numbers come back.** A seeded (`seed=0` is the default) synchronous run gives
the same numbers on every execution.
"""),
        code("""
import workbench as wb

cluster = wb.Cluster(engines=4).start()
digits = wb.datasets.digits()
args = dict(model=wb.models.mlp((64, 32)), data=digits, global_batch_size=128, steps=200, learning_rate=0.1,
            checkpoint_every=0)
run = cluster.train(strategy="multi_worker_mirrored", workers=2, **args)
"""),
        md("""
The cell above shows the live dashboard. Under nbval it is compared only as "a dashboard of
this run": what it showed at that moment is never what the saved notebook shows. The cell
that waits for the run ends with the run's final static rendering, its own output, which
the saved notebook, GitHub and nbval all see. nbval compares one line of it, the line its
text shows: how the run ended, its final loss and its test accuracy.
"""),
        code("""
run.wait()
"""),
        md("""
Printed numbers are compared as printed: round them to what teaches. Timings and speeds in
any output are replaced by `T` and `N` on both sides before comparing (so are run ids,
PIDs, ports and paths): this line passes on every execution, the seconds and examples per
second whatever they are.
"""),
        code("""
h = run.history
loss = h.groupby("step").loss.mean().iloc[-1]
print(f"last step's loss {loss:.4f} (the run's final loss, the mean of its last 10 steps, is in its line above) after {h.elapsed.max():.1f} s, {h.examples_per_s.median():,.0f} examples/s per worker")
"""),
        md("""
**A run whose numbers vary.** Two parameter-server workers apply their updates as they
arrive, in no fixed order: loss and accuracy differ from one execution to the next. Its
rendering's line says so instead of giving them, and `wb.within` states what the run
teaches as a band: it shows the band and the measured value, is compared without the value,
and fails the cell with the value when it falls outside.
"""),
        code("""
pss = cluster.train(strategy="parameter_server", workers=2, ps=1, **args).wait()
wb.within(pss.evaluation["test_accuracy"], 0.85, 1.0, "test accuracy")
"""),
        md("""
Drawn: the two runs' loss per step (left) and each run's test accuracy against the band
the cell above states (right). Run the notebook again and the synchronous curve and its
point come back exactly; the parameter server's move, inside the band.
"""),
        code("""
import matplotlib.pyplot as plt

fig, (curves, band) = plt.subplots(1, 2, figsize=(9, 3.6), gridspec_kw={"width_ratios": [2, 1]}, layout="constrained")
for r, label, colour in ((run, "all-reduce (seeded: the same every time)", "#4c72b0"),
                         (pss, "parameter server, 2 workers (varies)", "#dd8452")):
    curves.plot(r.history.groupby("step").loss.mean(), color=colour, label=label)
curves.set(xlabel="step", ylabel="training loss (mean over workers)", yscale="log", title="loss per step")
band.axhspan(0.85, 1.0, color="#55a868", alpha=0.2, label="the band wb.within checks: 0.85-1.0")
band.plot([0], [run.evaluation["test_accuracy"]], "o", color="#4c72b0", label="all-reduce: compared as printed")
band.plot([1], [pss.evaluation["test_accuracy"]], "s", color="#dd8452", label="parameter server: inside the band?")
band.set(xlim=(-0.5, 1.5), ylim=(0.8, 1.0), xticks=[0, 1], xticklabels=["all-reduce", "param. server"],
         ylabel="test accuracy", title="what nbval compares")
for ax in (curves, band):  # each legend under its chart
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8)
plt.show()
"""),
        md("""
`wb.compare` is compared through each run's line too; its table's speeds are not.
"""),
        code("""
wb.compare(run, pss, labels=["all-reduce", "parameter server"])
"""),
        md("""
**Tag what the workbench cannot know.** A table of timings has nothing to compare: the tag
`nbval-ignore-output` (JupyterLab: the cell's property inspector, *Add Tag*; or the comment
`# NBVAL_IGNORE_OUTPUT`) runs the cell without comparing it. This one is tagged.
"""),
        code("""
h[["step", "worker", "step_time", "examples_per_s"]].tail(3)
""", volatile=True),
        md("""
**In CI.** The workflow below runs on every push and pull request; copy it to
`.github/workflows/notebooks.yml` in your repository and change its marked line to where
you install the workbench from. A folder of notebooks runs on one local cluster for the
whole session: each notebook's `wb.Cluster(...)` borrows fresh engines from it, and it stops
at the end, also when a notebook fails (`--wb-no-shared-cluster` gives each its own).
"""),
        code("""
print(open("../docs/notebooks-workflow.yml").read())
"""),
        code("""
cluster.stop()
cluster
"""),
    ]
