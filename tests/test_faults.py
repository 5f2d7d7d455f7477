"""Faults on a real local cluster: engines killed by PID in the middle of a run.

A parameter-server run outlives a lost worker (the workbench starts a replacement on the
same port); a lost PS task, chief or synchronous worker ends the run at once with an error
naming it, and ``resume()`` continues from the last checkpoint to the exact step count."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

import workbench as wb
from checks import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DIGITS = wb.datasets.digits()
MLP = wb.models.mlp((64, 32))
STEPS, EVERY = 2000, 400


@pytest.fixture(scope="module")
def cluster():
    c = wb.Cluster(engines=4).start()
    yield c
    c.stop()


def kill(cluster, run, role, index):
    task = next(t for t in run.tasks if (t.role, t.index) == (role, index))
    os.kill(cluster.engine_info[task.engine_id].pid, signal.SIGKILL)  # an engine this test's cluster started
    return task


def start(cluster, strategy, steps=STEPS, **kw):
    topology = dict(workers=2, ps=1) if strategy == "parameter_server" else dict(workers=2)
    run = cluster.train(MLP, DIGITS, strategy=strategy, global_batch_size=64, steps=steps, learning_rate=0.05,
                        checkpoint_every=EVERY, **topology, **kw)
    wait_for(lambda: run.step >= EVERY + 100, 120, lambda: f"step {EVERY + 100}; at {run.step}")
    return run


# From the kill to the replacement's first step, measured here: 2.3 s idle, 2.9 s with two
# busy loops on the 2 cores, on the cluster's spare engine. Before it (a new engine started
# and importing TF after the loss) 6.6 s idle, 13.7 s with the busy loops, and ~36 s in
# walkthrough 07 on a machine loaded by a whole test run (issue 19). Forked from the
# cluster's zygote instead of a spare: 3.8 and 3.9 s, with a whole test run on the 2 cores.
REPLACED_WITHIN = 30


def first_step_of_replacement(run, name):
    """The time of the first step ``name`` reported after its replacement engine's TF server
    came up (the worker_replaced event), or None yet. Earlier rows under that name are the
    lost engine's."""
    events = run.events
    if "task" not in events:
        return None
    replaced = events[(events.kind == "worker_replaced") & (events.task == name)]
    if replaced.empty:
        return None
    h = run.history
    mine = h[(h.worker == name) & (h.time > replaced.time.iloc[0])]
    return float(mine.time.min()) if len(mine) else None


def test_a_lost_parameter_server_worker_is_replaced_promptly_and_shown(cluster):
    run = start(cluster, "parameter_server", steps=1_000_000)  # stopped once the replacement has stepped
    dash = run.dashboard(interval=0.25)
    dead = cluster.engine_info[next(t for t in run.tasks if t.name == "worker:1").engine_id].pid
    dead_parent = psutil.Process(dead).ppid()  # the zygote, if the engines fork from one
    killed_at = time.time()
    lost = kill(cluster, run, "worker", 1)
    try:
        first = wait_for(lambda: first_step_of_replacement(run, "worker:1"), 2 * REPLACED_WITHIN,
                         lambda: f"a step of the replacement; at step {run.step}, events {run.events.to_dict('records')}")
    finally:
        run.stop()
    assert first - killed_at < REPLACED_WITHIN, f"the replacement's first step came {first - killed_at:.1f} s after the kill"
    assert run.stopped and run.failure is None
    h = run.history
    assert sorted(h.step) == list(range(1, run.final_step + 1)), "every step reported exactly once"
    # steps in flight on the lost worker may be re-run on the other: the model's own counter
    # is a lower bound, and exceeds it by at most the functions in flight (2 per worker,
    # 10 steps each) plus the one the worker was running
    model_steps = run.events.query("kind == 'checkpoint'").model_steps.iloc[-1]
    assert run.final_step <= model_steps <= run.final_step + (2 * 2 + 1) * 10
    ev = run.events
    worker_events = ev[ev.kind.str.startswith("worker_")][["kind", "task", "step", "time"]]
    assert list(ev[ev.kind == "worker_lost"].task) == ["worker:1"], worker_events
    assert list(ev[ev.kind == "worker_replaced"].task) == ["worker:1"], worker_events
    new = next(t for t in run.tasks if (t.role, t.index) == ("worker", 1))
    assert new.engine_id != lost.engine_id and new.target == lost.target, "same port, new engine"
    pid = cluster.engine_info[new.engine_id].pid
    print(f"the replacement's first step came {first - killed_at:.1f} s after the kill")
    # the replacement imported TF before the loss: a fork of the cluster's zygote, or else the
    # spare started with the run (Cluster.keep_standby), not a process started after the loss
    if cluster.started_by_zygote:
        assert psutil.Process(pid).ppid() == dead_parent
    else:
        assert psutil.Process(pid).create_time() < killed_at
    # every view shows the replacement, none the dead engine
    tasks = run.placement[run.placement.variable.isna()].set_index(["role", "task"])
    assert tuple(tasks.loc[("worker", 1), ["engine", "pid"]]) == (new.engine_id, pid)
    assert dead not in set(tasks.pid) and dead not in set(cluster.engines.pid) and pid in set(cluster.engines.pid)
    wait_for(lambda: f"pid {pid}<" in dash.placement.value, 10, lambda: f"pid {pid} in the placement view")
    assert f"pid {dead}<" not in dash.placement.value and f"<td>{dead}</td>" not in dash.placement.value
    assert f"worker:1 (engine {new.engine_id}: " in dash.engines.value
    # the cluster is usable afterwards, on the replacement engine too
    again = cluster.train(MLP, DIGITS, strategy="parameter_server", workers=2, ps=1, global_batch_size=64,
                          steps=100, checkpoint_every=0).wait(timeout=300)
    assert again.final_step == 100


# bound: the error instead of a hang. wait() raises it after replacing the lost engine
# (~6 s of a lost chief's 9 s here), so a loaded machine needs the margin
@pytest.mark.parametrize("strategy,role,index,bound", [
    ("parameter_server", "ps", 0, 20),
    ("parameter_server", "chief", 0, 20),
    ("multi_worker_mirrored", "worker", 1, 60),
])
def test_a_lost_task_fails_fast_naming_it_and_resume_completes_exactly(cluster, strategy, role, index, bound):
    run = start(cluster, strategy)
    kill(cluster, run, role, index)
    t0 = time.monotonic()
    with pytest.raises(wb.EngineError) as info:
        run.wait(timeout=bound)
    assert time.monotonic() - t0 < bound
    assert str(info.value).startswith(f"{role}:{index} (engine ")
    assert "was lost at step" in str(info.value) and "checkpoint is at step" in str(info.value)
    assert "Its last output:\n" in str(info.value) and "[IPEngine." in str(info.value).split("Its last output:")[1]
    reached = run.step
    saved = int(run.events.query("kind == 'checkpoint'").step.max())
    assert reached - saved <= EVERY, "at most one checkpoint interval is lost"
    resumed = run.resume().wait(timeout=300)
    assert resumed.final_step == STEPS
    # one id names the run, each attempt its own number: the resumed run loads by its id,
    # here (its live handle) and in another kernel (from its run directory)
    assert resumed.id == run.id and (run.attempt, resumed.attempt) == (0, 1)
    assert wb.load(resumed.id) is resumed
    other = subprocess.run([sys.executable, "-c", "import sys, workbench as wb; r = wb.load(sys.argv[1]); "
                            "print(r.id, r.status, r.attempt, r.final_step)", resumed.id],
                           capture_output=True, text=True, timeout=120)
    assert other.stdout.split() == [run.id, "finished", "1", str(STEPS)], other.stderr[-2000:]
    h = resumed.history
    if strategy == "parameter_server":
        assert sorted(h.step) == list(range(saved + 1, STEPS + 1))
    else:
        for w in ("worker:0", "worker:1"):
            assert list(h[h.worker == w].step) == list(range(saved + 1, STEPS + 1))


def test_a_run_lost_before_its_first_checkpoint_resumes_from_step_0():
    """The error says it saved no checkpoint yet, and ``resume()`` starts it again from step
    0, each step reported once (it failed: 'resume=True but no checkpoint', seen when TF's
    profiler crashed a worker at step 59)."""
    with wb.Cluster(engines=2) as cluster:
        run = cluster.train(MLP, DIGITS, strategy="multi_worker_mirrored", workers=2, global_batch_size=64,
                            steps=300, checkpoint_every=10_000, dashboard=False)
        wait_for(lambda: run.step >= 20 or run.done, 120, lambda: f"step 20; at {run.step}")
        kill(cluster, run, "worker", 1)
        with pytest.raises(wb.EngineError, match="it saved no checkpoint yet"):
            run.wait(timeout=60)
        resumed = run.resume().wait(timeout=300)
    assert resumed.final_step == 300
    for w in ("worker:0", "worker:1"):
        assert list(resumed.history[resumed.history.worker == w].step) == list(range(1, 301))
        assert list(wb.load(run.id).history.query("worker == @w").step) == list(range(1, 301))


def test_results_lost_with_their_worker_are_told_from_other_errors():
    """The chief runs a call's steps again when the worker that ran them is gone before their
    results are read: unavailable, or replaced at its address before TF noticed (the new
    server knows none of the old one's handles; TF's coordinator reads the same messages as
    a worker's failure). Any other error stays the run's error."""
    import tensorflow as tf

    from workbench.engine.strategies.parameter_server import lost_with_its_worker

    def invalid(text):
        return tf.errors.InvalidArgumentError(None, None, text)

    replaced = ("2 root error(s) found.\n  (0) INVALID_ARGUMENT: Unable to find the relevant tensor remote_handle: "
                "Op ID: 2311, Output num: 0\n\t [[{{node RemoteCall}}]]\n  (1) INVALID_ARGUMENT: ...")
    assert lost_with_its_worker(tf.errors.UnavailableError(None, None, "failed to connect to all addresses"))
    assert lost_with_its_worker(invalid(replaced))
    assert lost_with_its_worker(invalid("/job:worker/replica:0/task:1: Unknown device"))
    assert not lost_with_its_worker(invalid("Incompatible shapes: [64,10] vs. [32,10]"))
    assert not lost_with_its_worker(tf.errors.NotFoundError(None, None, "Unable to find the relevant tensor"))
