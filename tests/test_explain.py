"""``run.explain()`` and ``wb.predict(...)`` on real runs: the cost model beside what the run
measured, for live and recorded runs, and what it refuses. The model's own numbers are
checked by hand in tests/test_costmodel.py; here, that a run is read into it right."""

import pytest

import workbench as wb

pytestmark = pytest.mark.cluster
DIGITS = wb.datasets.digits()


@pytest.fixture(scope="module")
def runs(cluster):
    def train(strategy, **kw):
        return cluster.train(wb.models.mlp((64, 32)), DIGITS, strategy=strategy, steps=120, global_batch_size=64,
                             checkpoint_every=0, dashboard=False, **kw).wait(timeout=300)

    return {"mwms": train("multi_worker_mirrored", workers=2), "ps": train("parameter_server", workers=1, ps=1),
            "single": train("single", workers=1), "untimed": train("single", workers=1, anatomy=False)}


def test_a_synchronous_run_is_explained_figure_by_figure(runs):
    run = runs["mwms"]
    e = run.explain()
    t = e.table.set_index("figure")
    assert list(e.table.columns) == ["figure", "predicted", "measured", "ratio", "source"]
    # the model's bytes (the placement's trainable variables, float32) are what the steps sent
    sent = t.loc["bytes handed to the all-reduce per step"]
    assert sent.predicted == 4 * (64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10) and sent.ratio == pytest.approx(1.0)
    assert t.loc["compute per step (ms)", "source"] == "measured (the model's input)"
    assert t.loc["steps/s", "measured"] > 0 and 0 < t.loc["steps/s", "ratio"] < 10
    assert e.sentence.endswith(f"measured {t.loc['steps/s', 'measured']:.3g} ({t.loc['steps/s', 'ratio']:.2f}).")
    assert any(e.sentence.startswith(kind) for kind in ("compute-bound", "overhead-bound", "latency-bound",
                                                         "communication-bound")), e.sentence
    assert "<table>" in e._repr_html_() and "measured / predicted" in e._repr_html_()
    # the same run read back in any kernel: the same prediction from its files
    again = wb.load(run.id)
    assert again is run or again.explain().table.predicted.tolist() == pytest.approx(e.table.predicted.tolist())


def test_a_recorded_run_is_explained_from_its_files(runs, tmp_path):
    from workbench.kernel.runs.recorded import RecordedRun

    run = runs["mwms"]
    recorded = RecordedRun(run.run_dir)  # not the live handle this kernel holds
    assert recorded.explain().table.predicted.tolist() == pytest.approx(run.explain().table.predicted.tolist())


def test_a_resumed_run_is_explained_from_its_newest_attempt(cluster):
    """A resumed run's figures count from its resume on (``job.first_step``), as its
    dashboard's do: explain() of a run read from its files once timed both attempts, the
    pause between them included."""
    from workbench.common import figures
    from workbench.kernel.runs.recorded import RecordedRun

    first = cluster.train(wb.models.mlp((64, 32)), DIGITS, strategy="single", workers=1, steps=120,
                          global_batch_size=64, checkpoint_every=60, dashboard=False).wait(timeout=300)
    resumed = cluster.resume(first.id, steps=240).wait(timeout=300)
    run = RecordedRun(resumed.run_dir)  # read from its files: both attempts' rows
    assert run.job.first_step == 121 and run.history.step.min() == 1
    measured = run.explain().table.set_index("figure").loc["steps/s", "measured"]
    newest = figures.history_figures(run.history, 64, 121)["steps_per_s"]
    whole = figures.history_figures(run.history, 64)["steps_per_s"]
    assert measured == pytest.approx(newest) and measured != pytest.approx(whole, rel=1e-3), (measured, newest, whole)


def test_a_parameter_server_run_counts_its_pulls_in_compute_and_a_ps_load(runs):
    t = runs["ps"].explain().table.set_index("figure")
    assert t.loc["compute per step (ms)", "source"] == "model: pulls of the variables"
    assert t.loc["ps:0 load (bytes/s pulled)", "predicted"] > 0


def test_predict_answers_for_runs_not_made_and_refuses_what_it_cannot_know(runs):
    run = runs["mwms"]
    four = wb.predict(run, workers=4).table.set_index("figure")
    assert four.loc["steps/s", "predicted"] > 0 and four.measured.isna().all()
    eight = wb.predict(run, workers=8, link="1gbit", cores=None)
    t = eight.table.set_index("figure")
    model = 64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10
    assert t.loc["w0 link bytes per step", "predicted"] == pytest.approx(2 * 7 / 8 * model * 4)
    assert "8 worker(s)" in eight.title and "each host its own cores" in eight.title
    half = wb.predict(run, workers=8, link="1gbit", cores=None, compression="fp16").table.set_index("figure")
    assert half.loc["w0 link bytes per step", "predicted"] == pytest.approx(t.loc["w0 link bytes per step",
                                                                                   "predicted"] / 2)
    # a data centre's latency: each of the ring's 2(n-1) messages waits 50 us instead of 2 ms
    fast = wb.predict(run, workers=8, link="1gbit", cores=None, latency=50e-6).prediction
    assert eight.prediction["latency_time"] == pytest.approx(14 * 2e-3)
    assert fast["latency_time"] == pytest.approx(14 * 50e-6)
    assert fast["comm_time"] == pytest.approx(eight.prediction["comm_time"] - 14 * (2e-3 - 50e-6))
    with pytest.raises(wb.ConfigError, match="argument 'latency'. Received: latency=-1"):
        wb.predict(run, latency=-1)
    with pytest.raises(wb.ConfigError, match="argument 'device'. Received: device='gpu'. Expected 'cpu'"):
        wb.predict(run, device="gpu")
    with pytest.raises(wb.ConfigError, match="argument 'link'. Received: link='fast'"):
        wb.predict(run, link="fast")
    with pytest.raises(wb.ConfigError, match="argument 'compression'. Received: compression='int4'"):
        wb.predict(run, compression="int4")
    with pytest.raises(wb.ConfigError, match="argument 'workers'. Received: workers=2"):
        wb.predict(runs["single"], workers=2)
    with pytest.raises(wb.ConfigError, match="argument 'run'.*has no anatomy"):
        runs["untimed"].explain()
