"""Zygote start (workbench.engine.startup.zygote): local engines fork from one process that imported
TensorFlow once. What is checked here is that it is real and safe, not how fast it is
(bench/scale.py measures that against each engine importing TensorFlow, alternated)."""

import os

import psutil
import pytest

import workbench as wb
from workbench.common.pids import alive

pytestmark = pytest.mark.cluster


def test_engines_fork_from_the_zygote_train_and_go_with_it():
    cluster = wb.Cluster(engines=3).start()
    try:
        assert cluster.started_by_zygote
        engines = {int(p) for p in cluster.engines.pid}
        # every engine is the zygote's child, and it has one thread at fork time: its own
        parents = {psutil.Process(p).ppid() for p in engines}
        assert len(parents) == 1
        zygote = parents.pop()
        assert "workbench.engine.startup.zygote" in psutil.Process(zygote).cmdline()
        assert psutil.Process(zygote).num_threads() == 1
        d = wb.datasets.digits()
        pss = cluster.train(wb.models.mlp((16,)), d, strategy="parameter_server", workers=1, ps=1,
                            global_batch_size=64, steps=20, checkpoint_every=0).wait(timeout=300)
        assert pss.final_step == 20
        # another topology recycles engines: the replacements fork from the zygote too
        mwms = cluster.train(wb.models.mlp((16,)), d, strategy="multi_worker_mirrored", workers=3,
                             global_batch_size=48, steps=20, checkpoint_every=0).wait(timeout=300)
        assert mwms.final_step == 20
        now = {int(p) for p in cluster.engines.pid}
        assert now - engines, "some engines were recycled"
        assert {psutil.Process(p).ppid() for p in now} == {zygote}
    finally:
        cluster.stop()
    assert not alive(zygote) and not [p for p in engines | now if alive(p)]
    assert not [f for f in os.listdir("/tmp") if f.startswith(f"wbz-{os.getpid()}-")], "its socket is removed"


def test_without_the_zygote_engines_import_tensorflow_themselves(monkeypatch):
    monkeypatch.setenv("WORKBENCH_ZYGOTE", "0")
    with wb.Cluster(engines=1) as cluster:
        assert not cluster.started_by_zygote
        assert psutil.Process(int(cluster.engines.pid.iloc[0])).ppid() == os.getpid()  # the launcher's child
        run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="single", workers=1,
                            global_batch_size=64, steps=5, checkpoint_every=0).wait(timeout=300)
        assert run.final_step == 5


def test_a_zygote_whose_kernel_is_gone_ends_and_removes_its_socket(tmp_path):
    """A kernel that dies before its cluster's reaper starts (during Cluster.start) leaves no zygote."""
    import subprocess
    import sys

    from checks import wait_for

    kernel = subprocess.run([sys.executable, "-c", "import os\nfrom workbench.kernel.launchers import zygote\n"
                             "z = zygote.start()\nprint(z.pid, z.path, flush=True)\nos._exit(0)"],
                            capture_output=True, text=True, timeout=120)
    pid, path = kernel.stdout.split()
    wait_for(lambda: not alive(int(pid)), 120, lambda: f"the orphaned zygote {pid} to end")
    assert not os.path.exists(path) and not os.path.exists(path + ".log")


def test_where_a_hosts_zygote_refused_its_launcher_command_starts_the_engine_itself_at_once(tmp_path):
    """On an SSH host whose zygote refused (a GPU host), ``workbench.engine.startup.forked`` reads
    "refused" beside the socket and becomes an engine the usual way; here it prints
    ipengine's version. (It waited 30 s for a PID there would never be.)"""
    import socket
    import subprocess
    import sys

    import ipyparallel

    (tmp_path / f"wbz-{socket.gethostname()}.sock.pid").write_text("refused")
    out = subprocess.run([sys.executable, "-m", "workbench.engine.startup.forked", str(tmp_path / "wbz-{host}.sock"), "-",
                          "--version"], capture_output=True, text=True, timeout=25)
    assert out.returncode == 0 and out.stdout.strip() == ipyparallel.__version__
