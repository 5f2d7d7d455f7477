"""Every task's output, live and after: each task's stdout and stderr (Python's and its
native code's: TensorFlow's C++ log, ``tf.print``) reach ``run.logs()`` while it trains, its
file in the run directory (``logs/<task>.log``), ``wb.load(id).logs()`` in another process,
``python -m workbench logs``, ``%wb logs`` and the dashboard's Logs view; the notices
TensorFlow prints at every start are folded into one line per task; the capture leaves
nothing behind on the engine."""

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stdout

import ipyparallel as ipp
import numpy as np
import pandas as pd
import pytest

import workbench as wb
from checks import wait_for
from workbench.common import logs
from workbench.store import RunDir

# -- the capture, in a process of its own ---------------------------------------------------

CAPTURE = """
import ctypes, io, json, os, sys, threading
from workbench.engine import tasklogs

class Out(io.StringIO):  # a stream on no descriptor, as ipykernel's OutStream is on an engine
    pass

run_dir, before_file = sys.argv[1], sys.argv[2]
os.dup2(os.open(before_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND), 2)  # where fd 2 pointed before
sys.stdout = Out()

def fds():
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # listdir's own
            pass
    return out


before, threads = fds(), threading.active_count()
tasklogs.begin(run_dir, "worker:0")
print("python's stdout")
threading.Thread(target=lambda: print("from another thread")).start()
os.write(2, b"native stderr\\npartial")
os.write(2, b" line, ended\\n")
ctypes.CDLL(None).printf(b"C's buffered stdout %d\\n", 42)
sys.stdout.write("a progress bar 10%\\ra progress bar 100%\\n")
during = threading.active_count()
window = tasklogs.end()
print(json.dumps({"window": window, "same_fds": fds() == before, "threads": [threads, during,
                  threading.active_count()], "kept_by_stdout": sys.stdout.getvalue()}), file=sys.__stdout__)
"""


def test_a_tasks_output_is_recorded_at_both_levels_passed_on_and_leaves_nothing_behind(tmp_path):
    """What Python writes to its streams and what native code writes to descriptors 1 and 2
    end up in the task's file and window, each line once with its stream; what the
    descriptors carried still reaches where they pointed, Python's stream still gets its
    own writes; when the capture ends, every descriptor and thread it made is gone."""
    before_file = tmp_path / "engine.log"
    out = subprocess.run([sys.executable, "-c", CAPTURE, str(tmp_path), str(before_file)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, before_file.read_text() if before_file.exists() else out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    lines = {(stream, text) for _, _, stream, text in result["window"]}
    assert lines == {("out", "python's stdout"), ("out", "from another thread"), ("err", "native stderr"),
                     ("err", "partial line, ended"), ("out", "C's buffered stdout 42"),
                     ("out", "a progress bar 100%")}
    assert [seq for seq, *_ in result["window"]] == list(range(1, 7))
    assert before_file.read_text() == "native stderr\npartial line, ended\n"  # passed on, as before
    assert "python's stdout\n" in result["kept_by_stdout"]
    recorded = logs.parse(RunDir(tmp_path).log_file("worker:0").read_text())
    assert [(s, t) for _, s, t in recorded] == [(s, t) for _, _, s, t in result["window"]]
    assert result["same_fds"], "descriptors left open or not restored"
    threads, during, after = result["threads"]
    assert during == threads + 1 and after == threads


def test_the_log_file_is_read_back_line_by_line_as_it_grows(tmp_path):
    store = RunDir(tmp_path)
    store.append_logs("worker:0", [(1.5, "out", "one"), (2.0, "err", "two: with spaces  ")])
    offsets = {}
    assert store.read_logs(offsets) == {"worker:0": [(1.5, "out", "one"), (2.0, "err", "two: with spaces  ")]}
    with open(store.log_file("worker:0"), "a") as f:
        f.write("3.000 out cut sh")  # its writer is still writing it
    assert store.read_logs(offsets) == {}
    with open(store.log_file("worker:0"), "a") as f:
        f.write("ort\n")
    assert store.read_logs(offsets) == {"worker:0": [(3.0, "out", "cut short")]}


# -- the kernel's side, from made-up windows ------------------------------------------------

NOTICES = [  # what a multi-worker task printed at its start here, TF_CPP_MIN_LOG_LEVEL=0
    "I0000 00:00:1795655138.834911   25441 coordination_service.cc:221] Initializing CoordinationService",
    "I0000 00:00:1795655138.836746   25441 grpc_server_lib.cc:467] Started server with target: grpc://127.0.0.1:19594",
    "I0000 00:00:1795655138.893035   25561 coordination_service.cc:505] Example stragglers:",
    "/job:worker/replica:0/task:1",
    "I0000 00:00:1795655938.162568   14652 eager_service_impl.cc:355] SessionOptions: goo.gle/debugproto   ",
    "device_count {",
    '  key: "CPU"',
    "}",
    "",
]


def window(lines, first=1, at=100.0, stream="err"):
    return {"lines": [(first + i, at + i, stream, text) for i, text in enumerate(lines)], "n": first + len(lines) - 1}


def test_start_up_notices_fold_into_one_line_per_task_and_the_rest_stays():
    book = logs.TaskLogs()
    book.merge("worker:0", window(NOTICES + ["E0000 00:00:1795655138.9 25441 coordination_service.cc:1] lost a peer",
                                             "loss: 0.5"]))
    book.merge("worker:1", window(NOTICES[:2], at=100.5))
    book.merge("worker:1", window(["building the model"], first=3, at=101.0, stream="out"))
    history = pd.DataFrame({"step": [1, 2, 3], "time": [100.5, 105.0, 109.0]})
    df = book.frame(started=99.0, history=history, where="/runs/r/logs")
    assert list(df.columns) == logs.COLUMNS
    assert list(df.line) == [
        "[9 lines of TensorFlow start-up notices folded; in full in /runs/r/logs/worker:0.log]",
        "[2 lines of TensorFlow start-up notices folded; in full in /runs/r/logs/worker:1.log]",
        "building the model",
        "E0000 00:00:1795655138.9 25441 coordination_service.cc:1] lost a peer",  # its errors are never folded
        "loss: 0.5"]
    assert list(df.step) == [0, 1, 1, 3, 3] and list(df.elapsed) == [1.0, 1.5, 2.0, 10.0, 11.0]
    assert list(book.frame(99.0, history, "/x", task="worker:1", since=1.5).line) == ["building the model"]
    assert list(book.frame(99.0, history, "/x", last=1).line) == ["loss: 0.5"]


def test_windows_merge_each_line_once_and_say_what_did_not_arrive():
    book = logs.TaskLogs()
    assert len(book.merge("ps:0", window(["a", "b"]))) == 2
    assert book.merge("ps:0", window(["a", "b"])) == []  # the same window, polled again
    assert [e[3] for e in book.merge("ps:0", window(["b", "c"], first=2))] == ["c"]
    missed = book.merge("ps:0", window(["g"], first=7))
    assert [e[3] for e in missed] == ["[3 lines of ps:0 did not reach this kernel live: they are in its log file]",
                                      "g"]
    book.restart("ps:0")  # a replacement engine counts from 1 again
    assert [e[3] for e in book.merge("ps:0", window(["again"]))] == ["again"]
    assert book.count == 6


def test_lines_know_the_step_the_run_had_reached():
    history = pd.DataFrame({"step": [2, 1, 3], "time": [10.0, 9.0, 12.0]})  # rows arrive out of order
    assert list(logs.steps_at([8.0, 9.0, 11.0, 12.5], history)) == [0, 1, 2, 3]


def test_the_noise_patterns_fold_what_tensorflow_prints_at_start_only():
    assert all(logs.is_noise(line, after) for line, after in zip(NOTICES, [False] * 5 + [True] * 4))
    for kept in ("W0000 00:00:1.0 1 grpc_server_lib.cc:99] Unavailable: peer lost", "tf.print 32",
                 "loss: 0.5", "Epoch 1/3"):
        assert not logs.is_noise(kept)


# -- real runs ---------------------------------------------------------------------------------

@ipp.interactive
def printing_model():
    import keras

    print("building the model")
    return keras.Sequential([keras.layers.Input((64,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(10)])


@ipp.interactive
def printing_loss(y, p):
    import sys

    import keras
    import tensorflow as tf

    tf.print("tf says: batch of", tf.shape(y)[0], output_stream=sys.stderr)  # TF's C++, on descriptor 2
    return keras.losses.sparse_categorical_crossentropy(y, p, from_logits=True)


@ipp.interactive
def engine_state():
    """What an engine's capture could leave behind: its thread, its descriptors (1 and 2
    pointing elsewhere, pipes)."""
    import os
    import threading

    from workbench.engine import tasklogs

    links = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            links[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return {"capturing": [t.name for t in threading.enumerate() if t.name == tasklogs.THREAD],
            "stdout": links["1"], "stderr": links["2"], "pipes": sum(v.startswith("pipe:") for v in links.values())}


@pytest.fixture(scope="module")
def chatty():
    """A cluster whose engines print TensorFlow's info lines: TF_CPP_MIN_LOG_LEVEL=0 in the
    kernel's environment when it starts, which its engines keep."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
        c = wb.Cluster(engines=3).start()
    yield c
    c.stop()


def states(cluster, tasks):
    return {t.name: cluster.client[t.engine_id].apply_sync(engine_state) for t in tasks}


@pytest.fixture(scope="module")
def mwms(chatty):
    """A multi-worker run whose model prints and whose loss tf.prints every step, watched
    while it trains, then stopped: (run, its lines seen live, its files then, its engines after)."""
    run = chatty.train(printing_model, wb.datasets.digits(), loss=printing_loss, strategy="multi_worker_mirrored",
                       workers=2, global_batch_size=64, steps=10**6, checkpoint_every=50, dashboard=False)

    def both_said_both():
        df = run.logs()
        said = {(t, k) for t in ("worker:0", "worker:1") for k in ("building the model", "tf says")
                if df[(df.task == t) & df.line.str.startswith(k)].shape[0]}
        return [df] if len(said) == 4 and run.step > 60 and not run.done else None

    try:
        [live] = wait_for(both_said_both, 180, lambda: (run.step, run.status, run.logs().tail(5).to_dict("records")))
        on_disk = RunDir(run.run_dir).read_logs({})
    finally:  # a fixture that failed leaves no run training on the module's cluster
        if not run.done:
            run.stop()
    assert run.stopped, run.error
    return run, live, on_disk, states(chatty, run.tasks)


def test_a_tasks_prints_and_tensorflows_lines_come_live_and_stay_in_its_files(mwms):
    run, live, on_disk, _ = mwms
    assert not live.empty and set(live.task) <= {"worker:0", "worker:1"}
    said = live[live.line.str.startswith("tf says")]
    assert (said.stream == "err").all() and "tf says: batch of 32" in set(said.line)
    assert (live[live.line == "building the model"].stream == "out").all()
    assert (live.elapsed > 0).all() and live.step.is_monotonic_increasing and said.step.max() > 0
    for task in ("worker:0", "worker:1"):  # the file too, while the run trained
        assert any(text.startswith("tf says") for _, _, text in on_disk[task])
    df = run.logs()
    assert len(df) >= len(live) and len(df[df.line == "building the model"]) == 2
    # TensorFlow's start-up notices: one line per task here, every one of them in the file
    folded = df[df.line.str.contains("TensorFlow start-up notices folded")]
    assert sorted(folded.task) == ["worker:0", "worker:1"], folded
    notices = [text for _, _, text in RunDir(run.run_dir).read_logs({})["worker:0"] if logs.is_noise(text)]
    assert any("Started server with target" in n for n in notices) and f"{len(notices)} lines" in \
        folded[folded.task == "worker:0"].line.iloc[0]
    assert not df.line.str.contains("Started server with target").any()
    # one clock with run.history: a task's n-th step's tf.print comes with its row for step n
    h = run.history
    for task in ("worker:0", "worker:1"):
        said = df[(df.task == task) & df.line.str.startswith("tf says")].time.to_numpy()
        rows = h[h.worker == task].sort_values("step").time.to_numpy()
        n = min(len(said), len(rows))
        assert n > 50 and abs(float(np.median(said[:n] - rows[:n]))) < 0.5, (said[:5], rows[:5])


def test_another_process_reads_a_runs_lines_back_and_the_cli_prints_them(mwms):
    run = mwms[0]
    code = f"import workbench as wb; print(wb.load({run.id!r}).logs().to_json(orient='records'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = pd.DataFrame(json.loads(out.stdout))
    here = run.logs()
    assert set(loaded.columns) == set(logs.COLUMNS)
    # the same lines, but those the files have and the windows did not carry (none here)
    assert sorted(zip(loaded.task, loaded.line)) == sorted(zip(here.task, here.line))
    cli = subprocess.run([sys.executable, "-m", "workbench", "logs", run.id[:-1], "--task", "worker:1"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr[-3000:]
    printed = cli.stdout.splitlines()
    assert sum("building the model" in line for line in printed) == 1 and \
        sum("TensorFlow start-up notices folded" in line for line in printed) == 1
    assert all(" worker:1 " in line for line in printed) and any("tf says: batch of 32" in line for line in printed)
    bad = subprocess.run([sys.executable, "-m", "workbench", "logs", run.id, "--task", "worker:7"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Invalid value for argument '--task'. Received: --task='worker:7'" in bad.stderr


def test_nothing_of_the_capture_is_left_on_the_engines_after_a_run(chatty, mwms):
    """Every task's capture ends with its task: on the same engines, a second run of the same
    topology leaves them as the first left them (descriptors 1 and 2 where they pointed, no
    more pipes, no capture thread)."""
    run, _, _, after_first = mwms
    again = chatty.train(printing_model, wb.datasets.digits(), loss=printing_loss, strategy="multi_worker_mirrored",
                         workers=2, global_batch_size=64, steps=20, checkpoint_every=0, dashboard=False)
    again.wait(timeout=120)
    assert [t.engine_id for t in again.tasks] == [t.engine_id for t in run.tasks]
    assert states(chatty, again.tasks) == after_first
    assert after_first["worker:0"]["capturing"] == []


def test_a_parameter_server_runs_servers_send_their_lines_until_the_run_ends(chatty):
    """A PS worker's task returns once its server is up; the steps it computes print
    afterwards (the loss's tf.print): those lines come live, and its capture ends with the run."""
    run = chatty.train(printing_model, wb.datasets.digits(), loss=printing_loss, strategy="parameter_server",
                       workers=1, ps=1, global_batch_size=64, steps=10**6, checkpoint_every=0, dashboard=False)
    on_disk = RunDir(run.run_dir).log_file("worker:0")
    wait_for(lambda: run.done or (run.logs(task="worker:0").line.str.startswith("tf says").sum() > 20 and run.step > 50),
             60, lambda: (run.step, run.status, run.logs().tail(5).to_dict("records"), on_disk.read_text()[-500:],
                          states(chatty, [t for t in run.tasks if t.role != "chief"])), every=0.5)
    assert not run.done, run.error
    servers = [t for t in run.tasks if t.role != "chief"]  # idle engines, whose capture goes on
    assert all(s["capturing"] for s in states(chatty, servers).values())
    run.stop()
    assert run.stopped, run.error
    df = run.logs()
    assert set(df.task) == {"chief:0", "ps:0", "worker:0"}
    assert (df[df.task == "chief:0"].line == "building the model").sum() == 1
    assert (df.groupby("task").line.apply(lambda s: s.str.contains("start-up notices folded").sum()) == 1).all()
    assert [s["capturing"] for s in states(chatty, run.tasks).values()] == [[], [], []]


def test_the_dashboards_logs_view_shows_lines_among_events_and_the_snapshot_keeps_them(mwms):
    from IPython.core.interactiveshell import InteractiveShell

    from workbench.kernel.views import logs as view
    from workbench.kernel.views import render

    run = mwms[0]
    shown = view.LogsView(run)
    shown.update(force=True)
    box = shown.box.value
    assert "tf says: batch of 32" in box and "worker:1 err" in box and "step " in box
    assert "wb-log-event" in box and "checkpoint" in box  # events on the same time axis, among the lines
    rows = re.findall(r"<div class='wb-log-(line|event)'[^>]*><span[^>]*>\s*([\d.]+) s (?:step (\d+))?", box)
    assert {kind for kind, _, _ in rows} == {"line", "event"}
    assert [float(e) for _, e, _ in rows] == sorted(float(e) for _, e, _ in rows)  # in time order,
    steps = [int(s) for _, _, s in rows if s]
    assert steps == sorted(steps) and len(steps) > 10  # and so in step order: one clock for lines and events
    shown.task.value = "worker:0"
    assert "worker:0 err" in shown.box.value and "worker:1 err" not in shown.box.value
    assert "tf says: batch of 32" in render.snapshot_html(run, "stopped")
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    with redirect_stdout(io.StringIO()) as out:  # %wb logs prints as the CLI does
        shell.run_line_magic("wb", f"logs {run.id} --task worker:0 --last 3")
    assert len(out.getvalue().splitlines()) == 3 and " worker:0 " in out.getvalue()
