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
    assert (r["status"], r["step"], r["steps_per_s"]) == ("stopped", 11, None)


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
    gives back the rows run.history had."""
    import pytest

    import workbench as wb

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    with wb.Cluster(engines=2) as cluster:
        run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="multi_worker_mirrored",
                            workers=2, steps=40, global_batch_size=64, dashboard=False)
        run.wait()
        live = run.history
    listed = wb.runs()
    assert list(listed.run_id) == [run.id] and listed.status[0] == "finished" and listed.step[0] == 40
    again = wb.history(run.id)
    assert len(again) == len(live) == 80 and again.loss.tolist() == live.sort_values(["step", "worker"]).loss.tolist()
    with pytest.raises(wb.ConfigError, match="argument 'run'"):
        wb.history("no-such-run")
