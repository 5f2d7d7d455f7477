"""Faults across (emulated) hosts: a machine lost mid-run (every engine of one host killed)
behaves as losing those engines on one machine (tests/test_faults.py): a parameter-server
run replaces its lost workers on their host, which is up again, and completes; a
multi-worker-mirrored run fails fast naming the lost task, and resumes to the exact step.
A host cut off the network fails a synchronous run naming the task it can no longer reach,
never a hang, without waiting for the controller's heartbeat. The dashboard's "kill
engines" button does the same as ``bed.kill_engines``, and the run's events say what it
injected and what followed."""

import time

import pytest

import workbench as wb
from checks import a_lost_host_of_workers_is_replaced_there, bed_cluster, exposure_warned, hosts_of, \
    stop_once_replaced, wait_for

pytestmark = [pytest.mark.hosts, pytest.mark.cluster, pytest.mark.slow]

DIGITS = wb.datasets.digits()
MLP = wb.models.mlp((64, 32))
STEPS, EVERY = 2000, 400


@pytest.fixture(scope="module")
def bed():
    with wb.testbed(hosts=3) as b:
        yield b


@pytest.fixture(scope="module")
def cluster(bed):
    # 4 engines on 3 hosts: tasks spread round-robin over hosts, so one host carries only
    # workers of a parameter-server run, and the two workers of an MWMS run are on two hosts
    c = bed_cluster(bed, {"h1": 1, "h2": 1, "h3": 2})
    assert exposure_warned(c)
    yield c
    c.stop()


def start(cluster, strategy, steps=STEPS, **kw):
    topology = dict(workers=2, ps=1) if strategy == "parameter_server" else dict(workers=2)
    run = cluster.train(MLP, DIGITS, strategy=strategy, global_batch_size=64, steps=steps, learning_rate=0.05,
                        checkpoint_every=EVERY, **topology, **kw)
    wait_for(lambda: run.step >= EVERY + 100 or run.done, 180, lambda: f"step {EVERY + 100}; at {run.step}")
    assert not run.done, run.error
    return run


def test_engines_killed_right_before_a_run_are_replaced_on_their_host_and_it_trains(cluster, bed):
    """A host's engines killed just before a run, before the controller's heartbeat notices
    (~4 s): the run's first question to them (does their host see the run directory?)
    finds them gone; they are replaced on their host and the run trains. (Once a
    parameter-server run ended inside that window, and the next ``train()`` failed with
    ipyparallel's CompositeError.) First in this file: its engines are fresh, so the plan
    restarts none of them before asking."""
    host = "h3"  # two engines; the run takes all four
    lost = {e for e, info in cluster.engine_info.items() if info.host == host}
    assert len(lost) == 2 and all(cluster.pool.state(e).fresh for e in cluster.engine_info)
    killed = bed.kill_engines(host)
    assert lost <= set(cluster.client.ids), "still registered: the controller has not noticed yet"
    # the next test's topology: it finds its engines in the state it needs
    run = cluster.train(MLP, DIGITS, strategy="parameter_server", workers=2, ps=1, global_batch_size=64, steps=20,
                        learning_rate=0.05, checkpoint_every=0).wait(timeout=300)
    assert sorted(set(run.history.step)) == list(range(1, 21))
    on_host = {t.engine_id for t in run.tasks if t.host == host}
    assert len(on_host) == 2 and not on_host & lost
    assert not {cluster.engine_info[e].pid for e in on_host} & set(killed)


def test_a_lost_host_of_parameter_server_workers_is_replaced_there_and_the_run_completes(cluster, bed):
    run = start(cluster, "parameter_server", steps=1_000_000)  # stopped once replaced (stop_once_replaced)
    a_lost_host_of_workers_is_replaced_there(cluster, bed, run)


def test_the_kill_engines_button_loses_a_hosts_workers_and_the_parameter_server_run_completes(cluster, bed):
    """Pressed as a user would, on a live parameter-server run's dashboard: every engine of
    a host that holds only workers is killed; the events record the injection (host, PIDs,
    step), then each of its workers lost and replaced on that host, in that order; the run
    goes on and stops cleanly with every step reported once."""
    run = cluster.train(MLP, DIGITS, strategy="parameter_server", workers=2, ps=1, global_batch_size=64,
                        steps=1_000_000, learning_rate=0.05, checkpoint_every=0)  # stopped once replaced
    faults = run.dashboard().faults
    assert faults is not None, "a run on the bed's hosts has the fault controls"
    wait_for(lambda: run.step >= 20 or run.done, 120, lambda: f"step 20; at {run.step}")
    assert not run.done, run.error
    placed = hosts_of(run)
    host = next(h for h, names in placed.items() if all(n.startswith("worker:") for n in names))
    lost = sorted(placed[host])
    pids = {t.name: cluster.engine_info[t.engine_id].pid for t in run.tasks if t.host == host}
    faults.host.value = host
    faults.kill.click()
    assert faults.result.value.startswith(f"{host}: killed {len(lost)} engine"), faults.result.value
    stop_once_replaced(run, lost, timeout=240)
    ev = run.events
    injected = ev[ev.kind == "injected"]
    assert list(injected.fault) == ["kill_engines"] and list(injected.host) == [host]
    assert injected.pids.iloc[0] == sorted(pids.values()) and injected.step.iloc[0] >= 20  # engines, not nannies
    lost_ev, replaced = ev[ev.kind == "worker_lost"], ev[ev.kind == "worker_replaced"]
    print(f"killed {host}'s engines {injected.pids.iloc[0]} at step {injected.step.iloc[0]}; lost "
          f"{list(lost_ev.task)} {lost_ev.time.min() - injected.time.iloc[0]:.2f} s later, replaced after "
          f"{replaced.time.max() - injected.time.iloc[0]:.1f} s, at step {replaced.step.max()}")
    assert sorted(lost_ev.task) == lost and sorted(replaced.task) == lost, ev[ev.kind.str.startswith("worker")]
    assert injected.time.iloc[0] <= lost_ev.time.min() and lost_ev.time.max() <= replaced.time.min()
    for name in lost:  # the replacement runs on the same host
        new = next(t for t in run.tasks if t.name == name)
        assert cluster.engine_info[new.engine_id].host == host and cluster.engine_info[new.engine_id].pid != pids[name]


def test_a_lost_host_fails_mwms_fast_naming_its_task_and_resume_completes(cluster, bed):
    run = start(cluster, "multi_worker_mirrored")
    host = next(t.host for t in run.tasks if t.name == "worker:1")
    assert hosts_of(run)[host] == ["worker:1"]
    bed.kill_engines(host)
    t0 = time.monotonic()
    with pytest.raises(wb.EngineError) as info:
        run.wait(timeout=60)
    print(f"lost host {host}: the run failed {time.monotonic() - t0:.1f} s after the kill")
    assert time.monotonic() - t0 < 60
    assert str(info.value).startswith("worker:1 (engine ")
    assert f"on {host}" in str(info.value) and "its process ended" in str(info.value)
    saved = max(run.checkpoint_steps())
    resumed = run.resume().wait(timeout=300)
    assert resumed.final_step == STEPS
    h = resumed.history
    for w in ("worker:0", "worker:1"):
        assert list(h[h.worker == w].step) == list(range(saved + 1, STEPS + 1))
    assert host in set(t.host for t in resumed.tasks) | set(cluster.engines.host)


def test_a_link_taken_down_fails_mwms_naming_the_unreachable_task_without_waiting_for_the_heartbeat(bed):
    """A host cut off the network (``bed.link_down``) fails a synchronous run naming the task
    whose TF server no longer answers from here, never a hang, and the kernel asks that
    server itself instead of waiting for the controller's heartbeat to drop the engine. The
    cluster here has ipyparallel's own heartbeat (a silent engine dropped after ~30 s), as
    an attached ``ipcluster`` has it: the run is named while the controller still lists the
    lost engine, and ``wait()`` raises without trying to replace that engine on the cut
    host (over SSH: 40 s of timeouts before it gave up)."""
    c = bed_cluster(bed, {"h1": 1, "h2": 1}, controller_args=["--HeartMonitor.period=3000",
                                                               "--HeartMonitor.max_heartmonitor_misses=10"])
    try:
        run = start(c, "multi_worker_mirrored", steps=100_000)
        task = next(t for t in run.tasks if t.name == "worker:1")
        bed.link_down(task.host)
        try:
            t0 = time.monotonic()
            wait_for(lambda: run.done, 60, lambda: f"the run to fail; at step {run.step}")
            named = time.monotonic() - t0
            listed = task.engine_id in c.client.ids
            with pytest.raises(wb.EngineError) as info:
                run.wait(timeout=60)
            raised = time.monotonic() - t0
            print(f"link of {task.host} down: named after {named:.1f} s (engine still registered: {listed}), "
                  f"wait() raised after {raised:.1f} s: {info.value}")
        finally:
            bed.link_up(task.host)
        assert listed, "named before the controller's heartbeat dropped the engine"
        assert raised < 60
        message = str(info.value)
        assert message.startswith("worker:1 (engine ") and f"on {task.host}" in message
        assert f"{task.target} does not answer" in message and "unreachable" in message
        assert "engines_not_replaced" not in set(run.events.kind), run.events
    finally:
        c.stop()
