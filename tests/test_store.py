"""workbench.store: one owner for the run directory and the cluster records. It names every
path, writes whole files atomically, reads back what the kernel, the engines and the panel
exchange through them, and its records are the ones the panel's TypeScript reads."""

import json
import os
import re
import subprocess
import sys
import threading
import time
import typing
from pathlib import Path

import pytest

from workbench import store
from workbench.common.pids import started
from workbench.store import files, schema

ROOT = Path(__file__).resolve().parent.parent
PANEL_SOURCE = ROOT / "extensions" / "workbench-panel" / "src" / "index.ts"


def _keys(typed_dict):
    return set(typing.get_type_hints(typed_dict))


# -- atomic writes --------------------------------------------------------------------------

def _reader_sees(write, path, enough_reads, deadline):
    """Write two large records in turn to ``path`` with ``write`` while another thread reads
    it; returns the first read that was neither record (None if every read was whole) and
    the number of reads, after ``enough_reads`` whole reads or a first partial one."""
    records = [{"which": i, "pad": [i] * 50_000} for i in range(2)]
    whole = {json.dumps(r, indent=1, default=str) for r in records}
    write(path, records[0])
    done = threading.Event()
    seen = {"partial": None, "reads": 0}

    def writer():
        i = 0
        while not done.is_set():
            write(path, records[i % 2])
            i += 1

    def reader():
        end = time.monotonic() + deadline
        while seen["reads"] < enough_reads and time.monotonic() < end:
            text = path.read_text()
            seen["reads"] += 1
            if text not in whole:
                seen["partial"] = text
                break
        done.set()

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return seen["partial"], seen["reads"]


def test_a_reader_polling_a_record_never_sees_half_of_it(tmp_path):
    path = tmp_path / "run.json"
    # the check catches a plain write (truncate, then write) within a few reads
    plain = lambda p, r: p.write_text(json.dumps(r, indent=1, default=str))  # noqa: E731
    partial, reads = _reader_sees(plain, path, enough_reads=10**9, deadline=60)
    assert partial is not None, f"{reads} reads of a file rewritten in place, none of them partial"
    # the store's writer: every read is one record or the other
    partial, reads = _reader_sees(files.write_json, path, enough_reads=500, deadline=120)
    assert partial is None, f"read {len(partial)} characters of a record being written"
    assert reads == 500
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left


def test_a_failed_write_leaves_the_old_record_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "result.json"
    files.write_json(path, {"final_step": 1})

    def full(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", full)
    with pytest.raises(OSError, match="disk full"):
        files.write_json(path, {"final_step": 2})
    monkeypatch.undo()
    assert files.read_json(path) == {"final_step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


# -- the store's API ------------------------------------------------------------------------

def test_a_run_directory_names_its_files_and_carries_a_stop_request(tmp_path):
    home = store.Home(tmp_path)
    rd = home.run("20260101-000000-abc123")
    assert rd.path == tmp_path / "runs" / "20260101-000000-abc123" and rd.run_id == "20260101-000000-abc123"
    names = {rd.run_json: "run.json", rd.result_json: "result.json", rd.job_pkl: "job.pkl",
             rd.weights_npz: "weights.npz", rd.stop_file: "STOP", rd.metrics_dir: "metrics",
             rd.checkpoints_dir: "checkpoints", rd.tensorboard_dir: "tensorboard"}
    assert all(path == rd.path / name for path, name in names.items())
    assert rd.metrics_file("worker:0") == rd.path / "metrics" / "worker:0.jsonl"

    assert not rd.exists() and rd.read_run() is None and home.run_dirs() == []
    record = {"run_id": rd.run_id, "strategy": "single", "workers": 1, "ps": 0, "devices": 0, "steps": 10,
              "global_batch_size": 32, "started": 1.0, "notebook": None, "kernel_pid": os.getpid(),
              "profile": None, "tasks": [{"role": "worker", "index": 0, "engine": 0, "host": "h", "pid": 1}]}
    rd.write_run(record)  # makes the directory
    assert rd.exists() and rd.read_run() == record and [d.run_id for d in home.run_dirs()] == [rd.run_id]

    assert not rd.stop_requested()
    store.RunDir(str(rd.path)).request_stop()  # the panel, the CLI or another kernel asks
    assert rd.stop_requested() and rd.stop_file.exists()
    rd.clear_stop()
    assert not rd.stop_requested()

    assert not rd.ended()
    rd.write_result({"final_step": 10, "finished": 2.0, "error": None, "stopped": False, "evaluation": None})
    rd.write_weights([[1.0, 2.0], [[3.0]]])
    assert rd.ended() and rd.read_result()["final_step"] == 10
    assert [w.tolist() for w in rd.read_weights()] == [[1.0, 2.0], [[3.0]]]
    rd.forget_end()  # resumed: live again
    assert not rd.ended() and rd.read_weights() is None

    rd.write_job(b"pickled job")
    assert rd.read_job() == b"pickled job"


def test_a_stacks_request_made_while_another_is_answered_is_kept_and_a_garbled_one_is_cleared(tmp_path):
    """The panel's Stacks button asks through the run directory; the watcher claims the
    request (its file moved aside in one step) and answers it. A second request written
    while the first one's stacks are read must survive (its requester would otherwise wait
    out its timeout); a requester that gives up withdraws only its own request; a request
    file that holds no id is removed unanswered, not re-read on every poll."""
    rd = store.Home(tmp_path).run("20260101-000000-abc123")
    rd.path.mkdir(parents=True)
    assert rd.stacks_requested() is None and rd.claim_stacks() is None
    first = rd.request_stacks()
    assert rd.stacks_requested() == first and rd.claim_stacks() == first
    second = store.RunDir(str(rd.path)).request_stacks()  # another panel, while the stacks are read
    assert second != first
    rd.answer_stacks(first, [{"task": "worker:0"}])
    assert rd.stacks_answer(first)["tasks"] == [{"task": "worker:0"}] and rd.stacks_answer(second) is None
    assert rd.stacks_requested() == second  # kept: the next poll answers it
    rd.withdraw_stacks(first)  # the first requester's timeout: not the second's request
    assert rd.claim_stacks() == second
    rd.answer_stacks(second, [])
    assert rd.stacks_answer(second)["tasks"] == [] and rd.stacks_requested() is None
    third = rd.request_stacks()
    rd.withdraw_stacks(third)
    assert rd.stacks_requested() is None
    rd.stacks_request_file.write_text("{not json")
    assert rd.claim_stacks() is None and not rd.stacks_request_file.exists()
    assert not list(rd.path.glob("STACKS*"))  # no claimed file left behind


def test_checkpoint_step_metrics_tail_and_truncation(tmp_path):
    rd = store.RunDir(tmp_path / "run")
    assert rd.checkpoint_step() is None
    rd.checkpoints_dir.mkdir(parents=True)
    (rd.checkpoints_dir / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-40"\nall_model_checkpoint_paths: "ckpt-20"\nall_model_checkpoint_paths: "ckpt-40"\n')
    assert rd.checkpoint_step() == 40

    rd.metrics_dir.mkdir()
    with open(rd.metrics_file("worker:0"), "a") as f:
        for s in range(1, 61):
            f.write(json.dumps({"step": s, "worker": "worker:0", "loss": 1.0 / s, "time": float(s)}) + "\n")
        f.write(json.dumps({"event": {"kind": "checkpoint", "step": 40}}) + "\n")
        f.write(json.dumps({"event": {"kind": "checkpoint", "step": 60}}) + "\n")
        f.write('{"step": 61, "wor')  # a line being written
    offsets = {}
    read = rd.read_metrics(offsets)
    assert [r["step"] for r in read["rows"]] == list(range(1, 61)) and len(read["events"]) == 2
    assert rd.read_metrics(offsets) == {"rows": [], "events": []}  # nothing new
    with open(rd.metrics_file("worker:0"), "a") as f:
        f.write('ker": "worker:0", "loss": 0.01, "time": 61.0}\n')
    assert [r["step"] for r in rd.read_metrics(offsets)["rows"]] == [61]  # the rest of the line, next time

    rd.truncate(rd.checkpoint_step())  # a resume from step 40 does steps 41.. again
    again = rd.read_metrics({})
    assert [r["step"] for r in again["rows"]] == list(range(1, 41))
    assert [e["step"] for e in again["events"]] == [40]
    assert sorted(p.name for p in rd.metrics_dir.iterdir()) == ["worker:0.jsonl"]


def test_a_kernels_copy_of_a_remote_run_directory_follows_its_manager_and_reads_back(tmp_path):
    """``kernel/unshared.py`` writes here what tasks on other hosts sent: checkpoints (the
    ones the manager dropped there are dropped here) and metrics lines, read back like an
    engine's own."""
    rd = store.RunDir(tmp_path / "run")
    rd.checkpoints_dir.mkdir(parents=True)
    for step in (20, 40, 60, 80):
        for suffix in ("index", "data-00000-of-00001"):
            (rd.checkpoints_dir / f"ckpt-{step}.{suffix}").write_bytes(b"x")
    (rd.checkpoints_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-80"\n'
                                                   + "".join(f'all_model_checkpoint_paths: "ckpt-{s}"\n'
                                                             for s in (40, 60, 80)))
    assert rd.checkpoint_parts(80) == ["checkpoints/ckpt-80.data-00000-of-00001", "checkpoints/ckpt-80.index",
                                       "tensorboard", "checkpoints/checkpoint"]  # the state file last
    assert rd.prune_checkpoints() == ["ckpt-20.data-00000-of-00001", "ckpt-20.index"]
    assert sorted(p.name for p in rd.checkpoints_dir.glob("ckpt-*.index")) == [f"ckpt-{s}.index" for s in (40, 60, 80)]
    assert rd.prune_checkpoints() == [] and rd.checkpoint_step() == 80
    rd.append_metrics("worker:1", [{"step": 1, "worker": "worker:1"}, {"step": 2, "worker": "worker:1"}],
                      [{"kind": "checkpoint", "step": 2, "time": 1.0}])
    rd.append_metrics("worker:1", [], [])
    rd.append_metrics("worker:1", [{"step": 3, "worker": "worker:1"}], [])
    read = rd.read_metrics({})
    assert [r["step"] for r in read["rows"]] == [1, 2, 3] and [e["step"] for e in read["events"]] == [2]


def test_cluster_records_and_pid_files_live_under_the_home(tmp_path):
    home = store.Home(tmp_path)
    assert home.cluster_records() == [] and store.Records(tmp_path).clusters() == []
    alive = {"id": "c1", "kernel_pid": os.getpid(), "notebook": None, "controller_pid": os.getpid(),
             "profile": None, "engines": [{"id": 0, "host": "h", "pid": os.getpid(), "role": None, "device": "CPU"}]}
    dead = dict(alive, id="c2", controller_pid=2**22 + 12345)
    assert home.write_cluster(alive) == tmp_path / "clusters" / "c1.json"
    home.write_cluster(dead)
    gone = 2**22 + 12345  # above pid_max: no such process
    assert home.write_pids("c1", {os.getpid(), 1, gone}) == home.pidfile("c1") == tmp_path / "clusters" / "c1.pids"
    # each with its start time, which the reaper checks; a PID without a process is left out
    assert home.pidfile("c1").read_text() == f"1:{started(1)} {os.getpid()}:{started(os.getpid())}"
    assert [c["id"] for c in home.cluster_records()] == ["c1", "c2"]
    assert [c["id"] for c in store.Records(tmp_path).clusters()] == ["c1"]  # c2's controller is gone


def test_the_home_is_workbench_home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "wbhome"))
    assert store.home() == store.Home().path == tmp_path / "wbhome"
    assert store.Records().home == tmp_path / "wbhome"


# -- the records, as written and as the panel reads them --------------------------------------

def _interfaces(source):
    """``{interface name: {field names}}`` of a TypeScript source."""
    out = {}
    for name, body in re.findall(r"^interface (\w+) \{(.*?)^\}", source, re.M | re.S):
        out[name] = set(re.findall(r"^\s*(\w+)\??:", body, re.M))
    return out


# fields of the records the panel does not show, and who reads them
NOT_IN_PANEL = {
    "Cluster": {"kernel_pid", "controller_pid",  # Records.clusters: is the cluster alive?
                "profile"},  # %wb's table of clusters
}


def test_the_records_served_are_the_ones_the_panel_reads():
    """A field renamed, added or dropped on either side, the TypeScript interfaces of the
    panel or the store's TypedDicts, fails here."""
    panel = _interfaces(PANEL_SOURCE.read_text())
    pairs = {"Task": schema.TaskRecord, "Run": schema.RunSummary, "Engine": schema.EngineRecord,
             "Cluster": schema.ClusterRecord, "State": schema.State, "TaskStacks": schema.TaskStacksRecord}
    assert set(pairs) == set(panel), f"the panel's interfaces: {sorted(panel)}"
    from workbench.common.hangs import TaskStacks

    assert set(TaskStacks("worker:0", 1).record()) == _keys(schema.TaskStacksRecord)
    for name, typed in pairs.items():
        ours = _keys(typed) - NOT_IN_PANEL.get(name, set())
        assert panel[name] == ours, (f"interface {name} in {PANEL_SOURCE.name} reads {sorted(panel[name])}; "
                                     f"{typed.__name__} has {sorted(ours)}")


def test_records_read_back_have_exactly_their_declared_keys(tmp_path):
    rd = store.Home(tmp_path).run("r1")
    rd.metrics_dir.mkdir(parents=True)
    rd.write_run({"run_id": "r1", "strategy": "single", "workers": 1, "ps": 0, "devices": 0, "steps": 10,
                  "global_batch_size": 32, "started": 1.0, "notebook": None, "kernel_pid": os.getpid(),
                  "profile": None, "tasks": []})
    state = store.Records(tmp_path).state()
    assert set(state) == _keys(schema.State)
    assert set(state["runs"][0]) == _keys(schema.RunSummary) and state["runs"][0]["status"] == "running"
    assert state["runs"][0]["status"] in typing.get_args(schema.Status)


@pytest.mark.cluster
def test_a_real_run_writes_exactly_the_declared_records(tmp_path, monkeypatch):
    import workbench as wb

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    with wb.Cluster(engines=1) as cluster:
        (cluster_file,) = (tmp_path / "clusters").glob("*.json")
        written = json.loads(cluster_file.read_text())
        assert set(written) == _keys(schema.ClusterRecord)
        assert all(set(e) == _keys(schema.EngineRecord) for e in written["engines"]) and written["engines"]
        run = cluster.train(wb.models.mlp((8,)), wb.datasets.digits(), strategy="single", workers=1, steps=5,
                            global_batch_size=32, dashboard=False).wait()
    rd = store.RunDir(run.run_dir)
    started, result = json.loads(rd.run_json.read_text()), json.loads(rd.result_json.read_text())
    required = schema.RunRecord.__required_keys__
    assert required <= set(started) <= _keys(schema.RunRecord), sorted(started)
    assert all(set(t) == _keys(schema.TaskRecord) for t in started["tasks"]) and started["tasks"]
    assert set(result) == _keys(schema.ResultRecord) and result["final_step"] == 5
    assert not cluster_file.exists()  # a stopped cluster leaves no record


# -- who the store depends on -----------------------------------------------------------------

def test_the_store_works_without_tensorflow_or_ipyparallel(tmp_path):
    code = ("import sys\n"
            "for name in ('tensorflow', 'keras', 'ipyparallel'):\n"
            "    sys.modules[name] = None  # importing it fails\n"
            "from workbench import store\n"
            f"rd = store.Home({str(tmp_path)!r}).run('r1')\n"
            "rd.write_run({'run_id': 'r1', 'kernel_pid': 1})\n"
            "rd.request_stop()\n"
            "print(rd.stop_requested(), [r['run_id'] for r in store.Records(rd.path.parent.parent).runs()])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "['r1']"]
