"""The dashboard's widget model, driven by a real run (no browser here; see test_browser.py):
it gains points while training runs, names the PS task, stops the run, renders statically."""

import time

import pytest

import workbench as wb
from checks import wait_for
from workbench.kernel.views import render

pytestmark = pytest.mark.cluster

DIGITS = wb.datasets.digits()


@pytest.fixture(scope="module")
def cluster():
    c = wb.Cluster(engines=3).start()
    yield c
    c.stop()


def points(dash):
    return sum(len(line.x) for line in dash.loss_lines.values())


def test_dashboard_follows_a_parameter_server_run_and_stops_it(cluster):
    run = cluster.train(wb.models.mlp(), DIGITS, strategy="parameter_server", workers=1, ps=1,
                        global_batch_size=128, steps=1_000_000, eval_every=200, checkpoint_every=0)
    dash = run.dashboard(interval=0.25)
    seen = []
    end = time.monotonic() + 120
    while run.step < 600 and time.monotonic() < end:
        seen.append(points(dash))
        time.sleep(0.2)
    assert run.step >= 600, f"run stuck at step {run.step}"
    assert len(set(seen)) >= 3 and seen == sorted(seen), f"the loss chart should grow while training: {seen[:20]}"
    assert "ps:0" in dash.placement.value and "chief:0" in dash.placement.value
    assert "examples/s" in dash.thr_text.value and "steps/s" in dash.thr_text.value
    # the cost model's line, live: the bottleneck named, predicted against measured
    wait_for(lambda: "predicted" in dash.model.value and "measured" in dash.model.value, 30, lambda: dash.model.value)
    # one state model: while the chief trains, the PS task and the worker serve it
    assert run.task_states() == {"chief:0": "running", "ps:0": "serving", "worker:0": "serving"}, run.task_states()
    assert len(dash.acc_points.x) >= 1  # test accuracy every 200 steps
    # it keeps redrawing by itself while the run trains (how often is bench/dashboard.py's
    # business: a rate asserted here failed at 1.99 Hz on a loaded machine)
    updates = dash.updates
    wait_for(lambda: dash.updates >= updates + 3, 30, lambda: f"3 more updates; {dash.updates - updates} so far")
    dash._stop()  # what the Stop button does
    run.wait(timeout=60)
    assert run.stopped and run.final_step < 1_000_000
    deadline = time.monotonic() + 10
    while "stopped" not in dash.status.value and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "stopped" in dash.status.value and dash.stop_button.disabled
    assert set(run.task_states().values()) == {"stopped"}, run.task_states()
    after = cluster.train(wb.models.mlp(), DIGITS, strategy="single", workers=1, steps=5,
                          global_batch_size=64, checkpoint_every=0).wait(timeout=300)
    # a later topology restarts some of the run's engines on purpose: never shown as lost
    assert "lost" not in run.task_states().values() and "lost" not in dash._engines_text(), run.task_states()
    assert set(after.task_states().values()) <= {"done", "recycled"}
    snapshot = dash._bundle()["text/html"]
    drawings = render.svgs_in(snapshot)  # images, which a notebook not yet trusted shows too
    assert len(drawings) == 3 and "<svg" not in snapshot, snapshot[:500]
    assert "ps:0" in drawings[2] and "Loss" in drawings[0] and "Throughput" in drawings[1]
    assert "Predicted, then measured" in snapshot and "ps:0 load" in snapshot  # the saved output has the model too


def test_dashboard_shows_the_error_in_full_and_scaling_efficiency(cluster):
    base = cluster.train(wb.models.mlp(), DIGITS, strategy="single", workers=1, steps=50,
                         global_batch_size=64, checkpoint_every=0).wait(timeout=300)
    run = cluster.train(wb.models.mlp(), DIGITS, strategy="multi_worker_mirrored", workers=2, steps=50,
                        global_batch_size=64, checkpoint_every=0).wait(timeout=300)
    dash = run.dashboard(baseline=base)
    dash._redraw()
    assert "scaling efficiency" in dash.thr_text.value
    bad = cluster.train(wb.models.mlp(classes=3), DIGITS, strategy="single", workers=1, steps=5,
                        global_batch_size=64)
    with pytest.raises(wb.EngineError):
        bad.wait(timeout=120)
    d = bad.dashboard()
    d._redraw()
    assert "Last error" in d.error.value and "Expected at most the 3 classes" in d.error.value
    assert "failed" in d.status.value


def test_compare_overlays_runs_and_tabulates_throughput(cluster):
    args = dict(global_batch_size=64, steps=60, checkpoint_every=0)
    single = cluster.train(wb.models.mlp(), DIGITS, strategy="single", workers=1, **args).wait(timeout=300)
    mwms = cluster.train(wb.models.mlp(), DIGITS, strategy="multi_worker_mirrored", workers=2, **args).wait(timeout=300)
    c = wb.compare(single, mwms, labels=["one process", "two workers"])
    assert list(c.table.index) == ["one process", "two workers"]
    assert (c.table["steps/s"] > 0).all() and (c.table["steps"] == 60).all()
    assert c.table.loc["two workers", "examples/s"] == pytest.approx(c.table.loc["two workers", "steps/s"] * 64)
    (loss_vs_step, step_legend), (loss_vs_time, _) = (box.children for box in c.widget.children[0].children)
    assert [len(m.x) for m in loss_vs_step.marks] == [60, 60]
    # legends under the charts, whole: none drawn inside the plot, where it covers curves or is clipped
    assert not any(m.display_legend for m in loss_vs_step.marks)
    assert "one process" in step_legend.value and "two workers" in step_legend.value
    assert loss_vs_time.axes[0].label == "wall time (s)"
    bundle = c._repr_mimebundle_()
    drawings = render.svgs_in(bundle["text/html"])
    assert len(drawings) == 2 and all("two workers" in d for d in drawings)
    with pytest.raises(wb.ConfigError, match="argument 'runs'"):
        wb.compare("not a run")
    with pytest.raises(wb.ConfigError, match="argument 'labels'"):
        wb.compare(single, mwms, labels=["only one"])
