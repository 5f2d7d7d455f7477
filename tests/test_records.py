"""workbench.store reads runs back from their run directories, incrementally."""

import json
import os

import numpy as np

from workbench import store


def _write(path, rows):
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_a_run_read_from_its_files_as_it_grows_and_ends(tmp_path):
    run_dir = tmp_path / "runs" / "20260101-000000-abc123"
    (run_dir / "metrics").mkdir(parents=True)
    store.write_json(run_dir / "run.json", {"run_id": run_dir.name, "strategy": "multi_worker_mirrored",
                                              "workers": 2, "ps": 0, "steps": 100, "kernel_pid": os.getpid(),
                                              "notebook": "/x/a.ipynb"})
    book = store.Records(tmp_path)
    _write(run_dir / "metrics" / "worker:0.jsonl",
           [{"step": s, "worker": "worker:0", "loss": 2.0 / s, "time": 1000.0 + s / 10} for s in range(1, 11)])
    _write(run_dir / "metrics" / "worker:0.jsonl", [{"event": {"kind": "checkpoint"}}])
    (run_dir / "metrics" / "worker:0.jsonl").open("a").write('{"step": 11, "wor')  # a line being written
    r = book.runs()[0]
    assert (r["status"], r["step"], r["steps"], r["workers"]) == ("running", 10, 100, 2)
    # its loss: figures.py's final loss, the mean of its last 10 steps' losses
    assert abs(r["loss"] - np.mean(2.0 / np.arange(1, 11))) < 1e-12
    assert abs(r["steps_per_s"] - 10.0) < 1e-6 and len(r["sparkline"]) == 10
    (run_dir / "metrics" / "worker:0.jsonl").open("a").write('ker": "worker:0", "loss": 0.1, "time": 1001.1}\n')
    assert book.runs()[0]["step"] == 11  # the rest of the line, read on the next poll
    store.write_json(run_dir / "result.json", {"final_step": 11, "error": None, "stopped": True})
    r = book.runs()[0]
    # an ended run shows its own steps/s (figures.py: after its first fifth of steps)
    assert (r["status"], r["step"]) == ("stopped", 11) and abs(r["steps_per_s"] - 10.0) < 1e-6


def test_the_sparkline_covers_the_whole_run_however_often_it_was_read(tmp_path):
    """Two identical runs of 3,000 steps and 2 workers, one read once at its end, the other
    polled every 37 rows while it was written: the same sparkline, from step 1 to the last."""
    rows = {w: [{"step": s, "worker": w, "loss": 3.0 / s + (0.01 if w == "worker:1" else 0), "time": 1000.0 + s / 100}
                for s in range(1, 3001)] for w in ("worker:0", "worker:1")}
    sparks = []
    for name, chunk in (("once", 3000), ("live", 37)):
        run_dir = tmp_path / "runs" / name
        (run_dir / "metrics").mkdir(parents=True)
        store.write_json(run_dir / "run.json", {"run_id": name, "strategy": "multi_worker_mirrored", "workers": 2,
                                                  "kernel_pid": os.getpid()})
        book = store.Records(tmp_path)
        for start in range(0, 3000, chunk):
            for w, rs in rows.items():
                _write(run_dir / "metrics" / f"{w}.jsonl", rs[start:start + chunk])
            book.run(run_dir)
        store.write_json(run_dir / "result.json", {"final_step": 3000, "error": None, "stopped": False})
        sparks.append(book.run(run_dir)["sparkline"])
    once, live = sparks
    assert live == once and 30 <= len(once) <= store.records.SPARK_POINTS
    # the first point is the mean loss of the first steps, the last one of the last steps
    assert once[0] > 0.1 and once[-1] < 3.0 / 2800 + 0.01, (once[0], once[-1])


def test_polling_keeps_read_offsets_only_for_the_runs_it_lists(tmp_path):
    import shutil

    book = store.Records(tmp_path)
    for name in ("a", "b", "c"):
        run_dir = tmp_path / "runs" / name
        (run_dir / "metrics").mkdir(parents=True)
        store.write_json(run_dir / "result.json", {"final_step": 1})
        _write(run_dir / "metrics" / "worker:0.jsonl", [{"step": 1, "worker": "worker:0", "loss": 1.0, "time": 1.0}])
    assert [r["run_id"] for r in book.runs()] == ["c", "b", "a"] and len(book._tails) == 3
    shutil.rmtree(tmp_path / "runs" / "b")
    assert [r["run_id"] for r in book.runs(limit=1)] == ["c"]
    assert [key[0] for key in book._tails] == [str(tmp_path / "runs" / "c")]


def test_a_run_whose_kernel_died_unrecorded_is_lost_and_a_failure_shows(tmp_path):
    dead = tmp_path / "runs" / "b"
    (dead / "metrics").mkdir(parents=True)
    store.write_json(dead / "run.json", {"strategy": "single", "kernel_pid": 2**22 + 12345})
    failed = tmp_path / "runs" / "a"
    failed.mkdir()
    store.write_json(failed / "result.json", {"error": "FloatingPointError: The loss became nan at step 3"})
    runs = {r["run_id"]: r for r in store.Records(tmp_path).runs()}
    assert runs["b"]["status"] == "lost" and runs["a"]["status"] == "failed" and "nan" in runs["a"]["error"]
    assert store.Records(tmp_path / "nothing").state()["runs"] == []


def test_runs_and_history_of_a_real_run_from_files_alone(tmp_path, monkeypatch):
    """A run's records are enough for a later kernel: wb.runs() lists it, wb.history()
    gives back the rows run.history had. And its figures are one set of numbers wherever
    they show: the dashboard, wb.compare, the CLI's summary, the panel and the loaded run
    all give figures.py's steps/s, examples/s and step time of the same rows (checkpoints
    every 10 steps: pauses inside the counted steps)."""
    import pytest

    import workbench as wb
    from workbench import cli
    from workbench.common import figures
    from workbench.kernel.views import compare

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    with wb.Cluster(engines=2) as cluster:
        run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="multi_worker_mirrored",
                            workers=2, steps=40, global_batch_size=64, dashboard=False, checkpoint_every=10)
        run.wait()
        live = run.history
    listed = wb.runs()
    assert list(listed.run_id) == [run.id] and listed.status[0] == "finished" and listed.step[0] == 40
    again = wb.history(run.id)
    assert len(again) == len(live) == 80 and again.loss.tolist() == live.sort_values(["step", "worker"]).loss.tolist()
    with pytest.raises(wb.ConfigError, match="argument 'run'"):
        wb.history("no-such-run")

    fig = figures.history_figures(live, 64)
    assert fig["steps_per_s"] > 0 and fig["examples_per_s"] == pytest.approx(64 * fig["steps_per_s"])
    for source in (run, wb.load(run.id)):  # this kernel's run and the run read back from its files
        row = compare.summary(source, "x")
        assert (row["steps/s"], row["examples/s"], row["step time (ms)"], row["wall time (s)"]) == pytest.approx(
            (fig["steps_per_s"], fig["examples_per_s"], fig["step_time"] * 1000, fig["wall_time"]), rel=1e-9)
        assert row["final loss"] == pytest.approx(figures.final_loss(live.step, live.loss))
        text = cli.summary(source)
        assert f"final loss     {row['final loss']:.4f} " in text and f"final loss     {row['final loss']:.4f} " in cli.describe(source)
        assert f"steps/s        {fig['steps_per_s']:,.1f} " in text and f"examples/s     {fig['examples_per_s']:,.0f} " in text
        assert f"step time      {fig['step_time'] * 1000:.2f} ms" in text, text
        dash = source.dashboard()  # this kernel's: the live widget, ended; a loaded run's: its snapshot
        if source is run:
            dash._redraw()
        shown = [dash._bundle()["text/html"], dash.thr_text.value] if source is run else [dash._repr_html_()]
        for html in shown:
            assert (f"whole run: <b>{fig['examples_per_s']:,.0f}</b> examples/s" in html
                    and f"{fig['steps_per_s']:,.1f} steps/s (wall clock)" in html
                    and f"step time {fig['step_time'] * 1000:.2f} ms (median" in html), html[:2000]
    panel = store.Records(tmp_path).runs()[0]
    assert panel["steps_per_s"] == pytest.approx(fig["steps_per_s"], rel=1e-9)
    assert panel["loss"] == pytest.approx(fig["final_loss"]) and listed.loss[0] == pytest.approx(fig["final_loss"])


def test_two_tasks_events_of_the_same_kind_at_the_same_microsecond_are_both_kept(tmp_path):
    """MWMS workers publish their placement when the collective building their variables
    releases them together: same kind, no step, the same time.time(). Both are kept; a
    repeat of either (every publish repeats the last events) is not."""
    from workbench.kernel.runs.recorded import RecordedRun

    run = RecordedRun(tmp_path / "runs" / "r1")
    t = 1795470000.123456
    placement = [{"kind": "placement", "time": t, "variables": [],
                  "tasks": [{"role": "worker", "task": i, "engine": i, "host": f"h{i + 1}", "pid": 100 + i}]}
                 for i in range(2)]
    run.log.merge({"events": placement[:1]}, "worker:0")
    run.log.merge({"events": placement[1:]}, "worker:1")
    run.log.merge({"events": placement}, None)  # the same events again, from the files
    tasks = run.placement[run.placement.variable.isna()]
    assert sorted(tasks.host) == ["h1", "h2"] and len(tasks) == 2


def test_a_task_that_reports_its_placement_again_is_counted_once(tmp_path):
    """A task that reports its variables again into the same run's events (a replacement
    engine publishes them as it builds its strategy) keeps one row per variable, the
    latest: before, the rows doubled, and ``run.explain()``, which sums them, would count
    the model's bytes twice. (A resumed run starts its events afresh: checked, 14 rows
    before and after ``resume()``.)"""
    from workbench.kernel.runs.explain import trainable_bytes
    from workbench.kernel.runs.recorded import RecordedRun

    run = RecordedRun(tmp_path / "runs" / "r1")
    variables = [{"device": f"/job:worker/replica:0/task:{i}/device:CPU:0", "variable": "dense/kernel:0",
                  "shape": [64, 10], "bytes": 2560, "kind": "model", "trainable": True} for i in range(2)]
    for attempt, t in enumerate((1795470000.0, 1795470100.0)):
        run.log.merge({"events": [{"kind": "placement", "time": t + i, "variables": variables[i:i + 1],
                                   "tasks": [{"role": "worker", "task": i, "engine": i, "host": f"h{i + 1 + 2 * attempt}",
                                              "pid": 100 + i}]} for i in range(2)]}, None)
    rows = run.placement[run.placement.variable.notna()]
    assert len(rows) == 2 and sorted(rows.task) == [0, 1]
    assert trainable_bytes(run.placement) == (2560, 1)
    assert sorted(run.placement[run.placement.variable.isna()].host) == ["h3", "h4"]  # the latest engines


def _attempts(pause=60.0):
    """A 2-worker run that did 230 steps at 371.5 steps/s (a checkpoint at step 200), was
    lost, and resumed from that checkpoint a minute later for steps 201-400 at 213.7. The
    workers' losses differ (worker:1's by 0.5). Rows as (first attempt, second attempt)."""
    def rows(steps, start, rate):
        return [{"step": s, "worker": w, "loss": 3.0 / s + (0.5 if w == "worker:1" else 0.0), "accuracy": 0.5,
                 "step_time": 1 / rate, "examples_per_s": 32 * rate, "replicas": 1,
                 "time": start + (s - steps[0] + 1) / rate + 1e-4 * i}
                for s in steps for i, w in enumerate(("worker:0", "worker:1"))]

    first = rows(range(1, 231), 1000.0, 371.5)
    return first, rows(range(201, 401), first[-1]["time"] + pause, 213.7)


def test_a_resumed_run_reads_as_its_newest_attempt_in_every_view(tmp_path):
    """Issue 35.6: the panel and %wb (store.Records), the CLI's summary and show, wb.compare
    and the dashboard's snapshot of a resumed run all give its newest attempt's figures: the
    pause between the attempts is no training time. A panel that read the run's files before
    the resume (which cuts them back to the checkpoint) reads the new attempt whole."""
    import pytest

    from workbench import cli
    from workbench.common import figures
    from workbench.kernel.runs.recorded import RecordedRun
    from workbench.kernel.views import compare
    from checks import recorded_run

    first, second = _attempts()
    panel = store.Records(tmp_path)
    run_dir = recorded_run(tmp_path, first, kernel_pid=os.getpid())
    assert panel.run(run_dir)["step"] == 230
    # the resume: files cut back to the checkpoint, run.json rewritten, the new attempt's rows
    run_dir = recorded_run(tmp_path, [r for r in first if r["step"] <= 200] + second, {"final_step": 400},
                           attempt=1, first_step=201, kernel_pid=os.getpid())
    for book in (panel, store.Records(tmp_path)):  # polled across the resume, and read afresh
        r = book.run(run_dir)
        assert r["status"] == "finished" and r["step"] == 400
        assert r["steps_per_s"] == pytest.approx(213.7)  # the pause counted: 5.2
        assert r["loss"] == pytest.approx(figures.final_loss([r["step"] for r in second], [r["loss"] for r in second]))
    run = RecordedRun(run_dir)
    assert compare.summary(run, "x")["steps/s"] == pytest.approx(213.7)
    text = cli.summary(run)
    assert "steps/s        213.7 (" in text and "since the resume at step 200" in text, text
    assert "since the resume at step 200: <b>13,677</b> examples/s" in run.dashboard()._repr_html_()


def test_a_run_s_loss_is_one_number_wherever_it_shows(tmp_path, monkeypatch):
    """Issue 35.8: the panel, wb.runs() and %wb (store.Records) showed one worker's newest
    row where the CLI's summary and show and wb.compare showed the mean of the last 10
    steps. Every view gives figures.final_loss: the mean over the last 10 steps of each
    step's mean over its workers."""
    import pytest

    import workbench as wb
    from workbench import cli
    from workbench.common import figures
    from workbench.kernel.runs.recorded import RecordedRun
    from workbench.kernel.views import compare
    from checks import recorded_run

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    first, _ = _attempts()
    run_dir = recorded_run(tmp_path, first, {"final_step": 230}, kernel_pid=os.getpid())
    want = figures.final_loss([r["step"] for r in first], [r["loss"] for r in first])
    assert want == pytest.approx(np.mean([3.0 / s + 0.25 for s in range(221, 231)]))
    assert store.Records(tmp_path).run(run_dir)["loss"] == pytest.approx(want)  # the panel and %wb
    assert wb.runs().loss[0] == pytest.approx(want)
    run = RecordedRun(run_dir)
    assert compare.summary(run, "x")["final loss"] == pytest.approx(want)
    assert f"final loss     {want:.4f} " in cli.summary(run) and f"final loss     {want:.4f} " in cli.describe(run)


def test_a_resumed_run_gives_its_newest_attempt_s_figures_live_and_from_its_files(tmp_path, monkeypatch):
    """Issue 35.6 on a real run: trained to step 60 (a checkpoint), resumed from it to 120.
    The resumed run in this kernel holds its new attempt's rows; its run directory holds
    both attempts'. The panel, the loaded run's summary and wb.compare's row give the live
    run's figures: the pause between the attempts (a stop, a launch) is not counted."""
    import pytest

    import workbench as wb
    from workbench import cli
    from workbench.common import figures
    from workbench.kernel.views import compare

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    with wb.Cluster(engines=2) as cluster:
        run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="multi_worker_mirrored", workers=2,
                            steps=60, global_batch_size=64, dashboard=False, checkpoint_every=30).wait()
        resumed = run.resume(steps=120).wait()
    assert resumed.history.step.min() == 61  # this kernel's: the new attempt's rows only
    fig = figures.history_figures(resumed.history, 64)
    panel = store.Records(tmp_path).runs()[0]
    assert panel["steps_per_s"] == pytest.approx(fig["steps_per_s"], rel=1e-9)
    assert panel["loss"] == pytest.approx(fig["final_loss"])
    loaded = wb.load(run.id)
    for source in (resumed, loaded):
        assert compare.summary(source, "x")["steps/s"] == pytest.approx(fig["steps_per_s"], rel=1e-9)
        assert f"steps/s        {fig['steps_per_s']:,.1f} " in cli.summary(source)
    both = loaded.history
    assert both.step.min() == 1 and both.step.max() == 120 and loaded.job.first_step == resumed.job.first_step == 61
    mixed = figures.history_figures(both, 64)["steps_per_s"]  # the pause between them counted
    assert mixed < 0.8 * fig["steps_per_s"], (mixed, fig["steps_per_s"])


def test_the_panel_counts_an_ended_parameter_server_runs_steps_as_its_figures_do(tmp_path):
    """The panel and ``%wb runs`` read an ended run's steps/s from its metrics files: for an
    asynchronous run by the share of each call inside the stretch, as the dashboard, the
    CLI and ``wb.compare`` do (figures.py), not its calls counted whole (x1.43 here)."""
    import sys

    import pandas as pd
    import pytest

    from workbench.common import figures

    sys.path.insert(0, os.path.dirname(__file__))
    from checks import recorded_run
    from test_figures import async_calls, async_rows

    step, time, step_time, worker = async_rows(async_calls())
    rows = [{"step": int(s), "worker": str(w), "loss": 1.0, "step_time": float(st), "time": float(t)}
            for s, t, st, w in zip(step, time, step_time, worker)]
    recorded_run(tmp_path, rows, {"final_step": int(step.max()), "finished": float(time.max()) + 0.1},
                 strategy="parameter_server", workers=3, ps=1, steps=int(step.max()))
    frame = pd.DataFrame(rows)
    fig = figures.history_figures(frame, 64)["steps_per_s"]
    whole = figures.run_figures(step, time, step_time, 64)["steps_per_s"]
    assert whole > 1.3 * fig
    assert store.Records(tmp_path).runs()[0]["steps_per_s"] == pytest.approx(fig, rel=1e-9)
