"""Real local clusters: start, inventory, stop by PID, attach, start failures, recycling."""

import contextlib
import glob
import json
import os
import sys
import tempfile

import ipyparallel as ipp
import pytest
from traitlets.config import Config

import workbench as wb
from workbench.common.roles import engine_tmpdir
from workbench.kernel.engines.processes import alive as _alive, family as _family, sweep_engine_tmpdirs

pytestmark = pytest.mark.cluster


@contextlib.contextmanager
def _stranger():
    """A process this one did not start (a shell's background child, reparented when the
    shell exits): what an ended engine's PID can name once it is recycled. Killed at the
    end, whatever the test did."""
    import subprocess

    import psutil

    pid = int(subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True,
                             text=True, check=True).stdout)
    process = psutil.Process(pid)
    try:
        yield pid
    finally:
        with contextlib.suppress(psutil.Error):
            process.kill()  # psutil refuses the PID if it names another process by now


def test_start_reports_engines_and_stop_leaves_no_process():
    with _stranger() as stranger:
        _stop_leaves_no_process(stranger)


def _stop_leaves_no_process(stranger):
    with wb.Cluster(engines=2) as c:
        c.launched.pids.add(stranger)  # as if an engine of the cluster had ended and its PID been recycled
        table = c.engines
        assert list(table.index) == [0, 1]
        assert set(table.columns) >= {"host", "address", "pid", "tf_port", "gpus", "cuda_visible_devices"}
        assert (table.address == "127.0.0.1").all()
        assert table.tf_port.nunique() == 2
        pids = list(table.pid) + [c.launched.ipp.controller.pid]
        assert all(_alive(p) for p in pids)
        pids = _family(pids)  # engine nannies and controller schedulers too
        assert "tf_state" in repr(c) and "<table" in c._repr_html_()
        # local engines set the shared environment and began importing TF at start
        # (workbench.engine.startup.start), then got their private TMPDIR
        env = c.client[:].apply_sync(_engine_env)
        assert [e[0] for e in env] == ["use_caller"] * 2
        assert len({e[1] for e in env}) == 2 and all(e[2] for e in env)
        # that import left out Keras's optional scikit-learn and matplotlib, which any code
        # on the engine can still import
        assert [e[3] for e in env] == [(False, False, True)] * 2
        # the workbench's own profile, not the user's IPython directory
        assert c.launched.ipp.profile_dir.startswith(os.environ["WORKBENCH_HOME"])
    assert not c.running
    assert [p for p in pids if _alive(p)] == []
    assert _alive(stranger), "the cluster's stop ended a process it did not start"


def test_the_reaper_ends_a_listed_pid_only_while_it_names_the_process_listed(tmp_path):
    """A dead kernel's reaper reads PID:START pairs: a PID whose start time differs now names
    another process (recycled) and is left alone; the listed process itself is ended."""
    from workbench.common.pids import started
    from workbench.kernel.launchers import reaper

    with _stranger() as stranger:
        (tmp_path / "clusters").mkdir()
        pidfile = tmp_path / "clusters" / "c.pids"
        pidfile.write_text(f"{stranger}:{started(stranger) - 1} {stranger} x:y")  # a wrong start time; none; junk
        reaper.end_listed(str(pidfile))
        assert _alive(stranger) and not pidfile.exists()
        pidfile.write_text(f"{stranger}:{started(stranger)}")
        reaper.end_listed(str(pidfile))
        _wait_gone([stranger], timeout=10)


@ipp.interactive
def _engine_env():
    import os
    import sys

    started = "tensorflow" in sys.modules
    import tensorflow  # noqa: F401 - waits for the start-up import

    left_out = ("sklearn" in sys.modules, "matplotlib" in sys.modules)
    from sklearn.datasets import load_digits

    return os.environ.get("GRPC_FAIL_FAST"), os.environ["TMPDIR"], started, left_out + (len(load_digits().data) > 0,)


def test_engines_that_exit_at_start_raise_with_their_output():
    cfg = Config()
    cfg.LocalEngineSetLauncher.engine_cmd = [sys.executable, "-c", "print('engine says: no GPU driver'); raise SystemExit(3)"]
    with pytest.raises(wb.ClusterError, match="(?s)exited before registering.*engine says: no GPU driver") as e:
        wb.Cluster(engines=1, timeout=60, config=cfg).start()
    assert not isinstance(e.value, wb.ClusterStartTimeout)  # at once: it waited for the whole timeout


def test_engines_that_never_register_time_out_with_log_tail():
    cfg = Config()
    cfg.LocalEngineSetLauncher.engine_cmd = [sys.executable, "-c", "import time; print('engine stuck', flush=True); time.sleep(300)"]
    with pytest.raises(wb.ClusterStartTimeout, match="(?s)did not register within 4 s.*engine stuck"):
        wb.Cluster(engines=1, timeout=4, config=cfg).start()


def test_attach_to_a_running_profile_and_leave_it_running(tmp_path):
    import ipyparallel as ipp
    from IPython.paths import get_ipython_dir

    profile_dir = os.path.join(get_ipython_dir(), "profile_wbattach")
    other = ipp.Cluster(n=1, profile_dir=profile_dir, log_level=40, controller_ip="127.0.0.1")
    rc = other.start_and_connect_sync()
    try:
        engine_pid = rc[:].apply_sync(os.getpid)[0]
        family = _family([engine_pid])
        c = wb.Cluster(profile="wbattach").start()
        assert list(c.engines.pid) == [engine_pid]
        assert c.attached and "attached" in repr(c)
        c.stop()
        assert _alive(engine_pid), "stop() of an attached cluster must not stop someone else's engines"
    finally:
        rc.close()
        other.stop_cluster_sync()
    _wait_gone(family)


def test_attach_takes_the_inventory_of_engines_that_register_later():
    """Attach mode once waited for one engine and never looked again: engines its owner
    adds later join the pool before the next run is planned."""
    from IPython.paths import get_ipython_dir

    from checks import wait_for

    profile_dir = os.path.join(get_ipython_dir(), "profile_wblate")
    other = ipp.Cluster(n=1, profile_dir=profile_dir, log_level=40, controller_ip="127.0.0.1")
    rc = other.start_and_connect_sync()
    pids = []
    try:
        c = wb.Cluster(profile="wblate").start()
        try:
            assert list(c.engine_info) == rc.ids
            other.start_engines_sync(n=1)  # ipyparallel's own API, after the attach
            wait_for(lambda: len(c.client.ids) == 2, 120, lambda: f"2 engines; registered: {c.client.ids}")
            late = (set(c.client.ids) - set(c.engine_info)).pop()
            run = c.train(wb.models.mlp((8,)), wb.datasets.digits(), strategy="multi_worker_mirrored", workers=2,
                          global_batch_size=32, steps=3, checkpoint_every=0).wait(timeout=300)
            assert run.final_step == 3
            assert sorted(t.engine_id for t in run.tasks) == sorted(c.engine_info) == sorted(rc.ids)
            assert late in c.engine_info and c.engines.loc[late, "pid"] > 0
            pids = list(c.engines.pid)
            tmpdirs = [engine_tmpdir(tempfile.gettempdir(), c.cluster_tag, e) for e in c.engine_info]
            assert all(os.path.isdir(d) for d in tmpdirs)
        finally:
            c.stop()
    finally:
        rc.close()
        other.stop_cluster_sync()
    _wait_gone(_family(pids), timeout=60)
    # an engine that exits removes its TMPDIR; one its ipcluster had to kill (TF's collectives
    # delay its exit) cannot: the next Cluster.start() sweeps those of engines that are gone
    assert all(os.path.exists(os.path.join(d, ".engine-pid")) for d in tmpdirs if os.path.exists(d))
    sweep_engine_tmpdirs()
    assert [d for d in tmpdirs if os.path.exists(d)] == []


def _wait_gone(pids, timeout=15):
    """ipyparallel's own stop: its engines' nannies exit on their own shortly after."""
    import time

    end = time.monotonic() + timeout
    while [p for p in pids if _alive(p)] and time.monotonic() < end:
        time.sleep(0.05)
    assert [p for p in pids if _alive(p)] == []


def test_recycle_replaces_an_engine_on_the_same_port():
    with wb.Cluster(engines=2) as c:
        before = c.engine_info[1]
        mapping = c.recycle([1])
        new = c.engine_info[mapping[1]]
        assert mapping[1] not in (0, 1) and new.port == before.port and new.pid != before.pid
        assert not _alive(before.pid)
        assert sorted(c.engine_info) == sorted([0, mapping[1]])


def test_a_cluster_stops_when_the_interpreter_exits(tmp_path):
    import subprocess

    code = ("import os, workbench as wb; c = wb.Cluster(engines=1).start(); "
            "print(*c.engines.pid, c.launched.ipp.controller.pid)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, WORKBENCH_HOME=str(tmp_path)))
    assert out.returncode == 0, out.stderr[-2000:]
    pids = [int(p) for p in out.stdout.split()]
    _wait_gone(pids)


def test_a_killed_kernel_leaves_nothing_running(tmp_path):
    """SIGKILL of the process that owns a local cluster: atexit never runs, so the
    cluster's reaper ends the controller, the engines and their children within 60 s."""
    import signal
    import subprocess

    code = ("import os, sys, workbench as wb; c = wb.Cluster(engines=2).start(); "
            "print(*c.engines.pid, c.launched.ipp.controller.pid, c.launched.reaper_process.pid, c.cluster_tag, c.started_by_zygote, flush=True); "
            "sys.stdin.readline(); os.kill(os.getpid(), 9)")
    owner = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=dict(os.environ, WORKBENCH_HOME=str(tmp_path)))
    *pids, tag, forked = owner.stdout.readline().split()
    pids = [int(p) for p in pids]
    assert len(pids) == 4, pids
    processes = _family(pids)  # with the engines' nannies and the controller's schedulers
    from workbench.kernel.launchers import zygote

    files = [engine_tmpdir(tempfile.gettempdir(), tag, "*")]
    files += [zygote.socket_path(owner.pid, "*")] if forked == "True" else []  # not with WORKBENCH_ZYGOTE=0
    assert all(glob.glob(f) for f in files), "engines' TMPDIRs (and the zygote's socket) exist while it runs"
    owner.stdin.write("\n")
    owner.stdin.flush()
    assert owner.wait(30) == -signal.SIGKILL
    _wait_gone(processes, timeout=60)  # the reaper among them: it removes the files before it exits
    assert not [f for pattern in files for f in glob.glob(pattern)], "files left behind by a killed kernel"


def test_every_engine_state_has_a_description():
    """``cluster.engines`` and the panel's record describe each TF state an engine can be in,
    the condemned one included (it once raised IndexError)."""
    from workbench.kernel.engines.pool import TFState

    worker = json.dumps({"cluster": {}, "task": {"type": "worker", "index": 1}})
    states = [TFState(fp) for fp in (None, ("local", 0), ("local", 2), ("cluster", worker))]
    states.append(TFState(("cluster", worker), usable=False))
    assert [s.describe() for s in states] == [
        "fresh", "local TF", "local TF (2 logical CPUs)", "cluster worker:1", "unusable, to be replaced"]


def test_options_ipyparallel_refuses_raise_and_leave_no_process():
    with pytest.raises(wb.ConfigError, match=r"argument 'n'. Received: n=2. Expected .*as engines=2"):
        wb.Cluster(n=2)
    before = _family({os.getpid()})
    with pytest.raises(wb.ConfigError, match="ipyparallel refused the cluster options: .*'nosuch'"):
        wb.Cluster(engines=1, controller="nosuch").start()
    assert _family({os.getpid()}) == before, "the zygote started for its engines is stopped again"
