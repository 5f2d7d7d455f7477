"""workbench.store reads runs back from their run directories, incrementally."""

import json
import os

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
    assert r["loss"] == 2.0 / 10 and abs(r["steps_per_s"] - 10.0) < 1e-6 and len(r["sparkline"]) == 10
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
            assert (f"<b>{fig['examples_per_s']:,.0f}</b> examples/s" in html and f"{fig['steps_per_s']:,.1f} steps/s" in html
                    and f"step time {fig['step_time'] * 1000:.2f} ms (whole run)" in html), html[:2000]
    panel = store.Records(tmp_path).runs()[0]
    assert panel["steps_per_s"] == pytest.approx(fig["steps_per_s"], rel=1e-9)


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
