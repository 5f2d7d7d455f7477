"""Clusters across (emulated) hosts over SSH: what engines report, what the kernel may
kill, and both strategies training across hosts, the MWMS-vs-single identity included."""


import os

import ipyparallel as ipp
import pytest
from traitlets.config import Config

import workbench as wb
from workbench.common import roles
from checks import bed_cluster, relative_difference

pytestmark = [pytest.mark.hosts, pytest.mark.cluster, pytest.mark.slow]

DIGITS = wb.datasets.digits()
MLP = wb.models.mlp((64, 32))


@pytest.fixture(scope="module")
def bed():
    with wb.testbed(hosts=2) as b:
        yield b


@pytest.fixture(scope="module")
def cluster(bed):
    c = bed_cluster(bed, 2)
    yield c
    c.stop()


def test_engines_report_their_host_and_the_address_of_their_connection(cluster, bed):
    table = cluster.engines
    assert sorted(table.host) == ["h1", "h1", "h2", "h2"]
    assert all(row.address == bed.hosts[row.host] for row in table.itertuples())
    # the controller listens only on the address the hosts reach
    assert cluster._controller_host() == bed.controller_ip
    # the security warning, once: TF servers on a network
    exposed = [w for w in cluster.start_warnings if "TensorFlow's gRPC servers" in w]
    assert len(exposed) == 1 and bed.hosts["h1"] in exposed[0]


def test_remote_pids_are_never_killed_or_reaped_locally(cluster):
    """SSH engines' PIDs belong to their hosts: only the controller and the ssh processes
    that keep each host's zygote are in the kill list and the reaper's pidfile."""
    ours = {cluster.launched.ipp.controller.pid, *(p.pid for p in cluster.launched.remote_zygotes)}
    assert len(ours) == 3 and cluster.launched.pids == ours
    assert sorted(int(t.split(":")[0]) for t in cluster.launched.pidfile.read_text().split()) == sorted(ours)
    assert not any(cluster._is_local(e) for e in cluster.engine_info.values())


@ipp.interactive
def _engine_process():
    import os
    import socket

    return socket.gethostname(), os.getpid(), os.getppid(), os.environ.get("WORKBENCH_LAUNCHER_PID")


def test_engines_fork_from_one_zygote_on_their_own_host(cluster, bed):
    """Each host imports TensorFlow once, in a zygote kept by an ssh process here; its
    engines are its children, and each reports the PID its launcher knows (the process that
    stands in for it), which it lives and dies with."""
    assert all(p.poll() is None for p in cluster.launched.remote_zygotes)
    path = _zygote_path(cluster)
    for eid, info in cluster.engine_info.items():
        host, pid, parent, stand_in = cluster.client[eid].apply_sync(_engine_process)
        assert host == info.host and stand_in == str(info.pid) != str(pid)
        assert bed.ssh(host, f"cat {path.format(host=host)}.pid").stdout == str(parent)
        assert "workbench.engine.startup.zygote" in bed.ssh(host, f"tr '\\0' ' ' < /proc/{parent}/cmdline").stdout


def test_stop_ends_each_hosts_zygote_and_leaves_none_of_its_files(bed):
    from checks import wait_for

    c = bed_cluster(bed, {"h1": 1})
    try:
        keepers, path = list(c.launched.remote_zygotes), _zygote_path(c).format(host="h1")
        zygote = int(bed.ssh("h1", f"cat {path}.pid").stdout)
    finally:
        c.stop()
    assert all(p.poll() is not None for p in keepers)
    wait_for(lambda: not os.path.exists(f"/proc/{zygote}"), 30, lambda: f"zygote {zygote} on h1 to end")
    assert bed.ssh("h1", f"ls {path}* 2>/dev/null").stdout == ""


def _zygote_path(cluster):
    """The socket path of ``cluster``'s zygotes, ``{host}`` for the host, from its ssh command."""
    command = cluster.launched.remote_zygotes[0].args
    return command[command.index("workbench.engine.startup.zygote") + 1]


def test_mwms_across_two_hosts_equals_single_on_the_same_global_batches(cluster):
    args = dict(global_batch_size=64, steps=40, learning_rate=0.1, seed=3, checkpoint_every=0)
    mwms = cluster.train(MLP, DIGITS, strategy="multi_worker_mirrored", workers=2, **args).wait(timeout=300)
    tasks = mwms.placement[mwms.placement.variable.isna()]
    assert sorted(tasks.host) == ["h1", "h2"]
    single = cluster.train(MLP, DIGITS, strategy="single", workers=1, **args).wait(timeout=300)
    error = relative_difference(mwms.weights(), single.weights())
    print(f"MWMS across 2 hosts vs single: relative difference {error:.2e}")
    assert error < 1e-5


def test_parameter_server_across_two_hosts_with_replacements_on_the_same_hosts(cluster, bed):
    run = cluster.train(MLP, DIGITS, strategy="parameter_server", workers=2, ps=1, global_batch_size=64,
                        steps=50, steps_per_execution=5, checkpoint_every=0).wait(timeout=300)
    assert sorted(run.history.step) == list(range(1, 51))
    tasks = run.placement[run.placement.variable.isna()]
    assert set(tasks.host) == {"h1", "h2"}
    # the engines the earlier runs left in other TF states were replaced on their own hosts
    table = cluster.engines
    assert sorted(table.host) == ["h1", "h1", "h2", "h2"]
    assert all(row.address == bed.hosts[row.host] for row in table.itertuples())
    for task in run.tasks:
        assert task.target == f"{cluster.engine_info[task.engine_id].address}:{cluster.engine_info[task.engine_id].port}"


@ipp.interactive
def blocked_dataset_fn(input_context):
    """Every worker's input blocks before its first batch."""
    import time

    import tensorflow as tf

    def wait(x):
        time.sleep(3600)
        return x

    x = tf.zeros((64, 16))
    y = tf.zeros((64,), tf.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    ds = ds.map(lambda x, y: (tf.ensure_shape(tf.numpy_function(wait, [x], tf.float32), [16]), y))
    return ds.batch(input_context.get_per_replica_batch_size(64))


@ipp.interactive
def tiny_model():
    import keras

    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(2, activation="softmax")])


def test_a_parameter_server_run_that_never_steps_fails_at_its_start_timeout(cluster):
    """No start timeout once applied to PS runs at step 0 (one hung past 480 s). Its engines,
    blocked on other hosts, are then replaced through their launcher."""
    run = cluster.train(tiny_model, blocked_dataset_fn, strategy="parameter_server", workers=2, ps=1,
                        global_batch_size=64, steps=50, checkpoint_every=0, start_timeout=10)
    with pytest.raises(wb.RunStalled, match=r"no step within 10 s of its start .*chief:0 .*made no step"):
        run.wait(timeout=120)
    after = cluster.train(MLP, DIGITS, strategy="parameter_server", workers=2, ps=1, global_batch_size=64,
                          steps=10, steps_per_execution=5, checkpoint_every=0).wait(timeout=300)
    assert sorted(after.history.step) == list(range(1, 11))
    assert not {t.engine_id for t in run.tasks} & set(cluster.engine_info)
    assert sorted(cluster.engines.host) == ["h1", "h1", "h2", "h2"]


def test_a_failed_ssh_start_is_a_cluster_error(bed):
    config = Config()
    config.SSHLauncher.remote_python = "/nonexistent/python3"
    options = bed.ssh_cluster(1, config=config)
    config.SSHLauncher.remote_python = "/nonexistent/python3"  # after the bed's own setting
    with pytest.raises(wb.ClusterError, match="failed to start"):
        wb.Cluster(**options, timeout=30).start()


def test_hosts_are_checked_before_anything_starts():
    with pytest.raises(wb.ConfigError, match="Invalid value for argument 'hosts'"):
        wb.Cluster(launcher="ssh", hosts={"h1": 0})
    with pytest.raises(wb.ConfigError, match='launcher="ssh"'):
        wb.Cluster(hosts={"h1": 1})
    with pytest.raises(wb.ConfigError, match="Invalid value for argument 'engines'"):
        wb.Cluster(3, launcher="ssh", hosts={"h1": 1, "h2": 1})
    with pytest.raises(wb.ConfigError, match=r"argument 'hosts'. Received: hosts=None. Expected a dict of host"):
        wb.Cluster(launcher="ssh")  # was a TypeError at start(): 'LazyConfigValue' object is not iterable
    config = Config()
    config.SSHEngineSetLauncher.engines = {"gpu1": 4, "gpu2": 4}  # the hosts in ipyparallel's own terms
    assert wb.Cluster(engines=8, launcher="ssh", config=config).n == 8


def test_loopback_addresses_on_different_hosts_are_refused():
    engines = [roles.EngineInfo(0, "h1", "127.0.0.1", 10, 5000), roles.EngineInfo(1, "h2", "127.0.0.1", 11, 5001)]
    with pytest.raises(wb.ClusterError, match="loopback address"):
        roles.plan(engines, ["worker"], 2, 0, True)
    same_host = [roles.EngineInfo(0, "h1", "127.0.0.1", 10, 5000), roles.EngineInfo(1, "h1", "127.0.0.1", 11, 5001)]
    assert len(roles.plan(same_host, ["worker"], 2, 0, True)) == 2
