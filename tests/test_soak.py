"""Soak and security on a real local cluster: many back-to-back runs leak nothing, and the
cluster's own sockets listen on loopback only."""

import os
import stat
import threading

import ipyparallel as ipp
import psutil
import pytest

import workbench as wb
from workbench.kernel.engines.processes import family

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DIGITS = wb.datasets.digits()
MLP = wb.models.mlp((32,))
# strategies that share engines without recycling, so the soak measures runs, not restarts
ROTATION = [dict(strategy="single", workers=1), dict(strategy="multi_worker_mirrored", workers=2),
            dict(strategy="mirrored", workers=1), dict(strategy="parameter_averaging", workers=2, average_every=2)]


@pytest.fixture(scope="module")
def cluster():
    c = wb.Cluster(engines=3).start()
    yield c
    c.stop()


def cluster_processes(c):
    return family({c.launched.ipp.controller.pid} | {i.pid for i in c.engine_info.values()})


def listening(pids):
    out = set()
    for pid in pids:
        try:
            for conn in psutil.Process(pid).net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    out.add((pid, conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            pass
    return out


def snapshot(c):
    procs = cluster_processes(c)
    me = psutil.Process()
    return {"processes": len(procs), "listening": len(listening(procs)),
            "kernel threads": threading.active_count(), "kernel rss": me.memory_info().rss}


@ipp.interactive
def traced_graphs():
    """TF graphs traced on this engine and still alive after a garbage collection."""
    import gc

    from tensorflow.python.framework import func_graph

    gc.collect()
    return sum(isinstance(o, func_graph.FuncGraph) for o in gc.get_objects())


def test_fifty_back_to_back_runs_leak_no_process_port_thread_or_memory(cluster):
    def one(i):
        run = cluster.train(MLP, DIGITS, global_batch_size=64, steps=20, checkpoint_every=0, dashboard=False,
                            **ROTATION[i % len(ROTATION)]).wait(timeout=300)
        assert run.final_step == 20
        return run

    for i in range(10):  # warm-up: every strategy has run on its engines
        one(i)
    before = snapshot(cluster)
    graphs_before = cluster.client[:].apply_sync(traced_graphs)
    for i in range(10, 50):
        one(i)
    after = snapshot(cluster)
    graphs_after = cluster.client[:].apply_sync(traced_graphs)
    print(f"soak: after 10 runs {before}, after 50 runs {after}; "  # shown with pytest -s
          f"graphs per engine {graphs_before} -> {graphs_after}")
    for key in ("processes", "listening", "kernel threads"):
        assert after[key] <= before[key], (key, before, after)
    # a run's traced graphs go with it (TF's gradient registry kept 3 per engine per run)
    assert all(a <= b for a, b in zip(graphs_after, graphs_before)), (graphs_before, graphs_after)
    assert after["kernel rss"] <= 1.05 * before["kernel rss"], (before, after)
    assert len(cluster.runs) == 50


def test_the_cluster_listens_on_loopback_except_tensorflows_own_servers(cluster):
    """ipyparallel's controller and engines bind 127.0.0.1. TensorFlow's gRPC servers bind
    every interface whatever their address (grpc_server_lib hard-codes 0.0.0.0): the only
    sockets off loopback must be exactly those, on the ports the workbench reserved."""
    cluster.train(MLP, DIGITS, strategy="multi_worker_mirrored", workers=2, global_batch_size=64, steps=5,
                  checkpoint_every=0, dashboard=False).wait(timeout=300)
    sockets = listening(cluster_processes(cluster))
    assert sockets, "found no listening sockets at all"
    tf_ports = {i.port for i in cluster.engine_info.values()}
    open_ = {(ip, port) for _, ip, port in sockets if not ip.startswith("127.")}
    assert {port for _, port in open_} <= tf_ports, open_
    assert all(ip in ("0.0.0.0", "::") for ip, _ in open_), open_
    controller = {(ip, port) for pid, ip, port in sockets if pid == cluster.launched.ipp.controller.pid}
    assert controller and all(ip == "127.0.0.1" for ip, _ in controller), controller


def test_connection_files_are_private_to_their_owner(cluster):
    """The files holding the controller's addresses and HMAC key (ipyparallel writes them
    0600 when it creates them; its cluster-*.json state file holds no key)."""
    security = os.path.join(cluster.launched.ipp.profile_dir, "security")
    files = [f for f in os.listdir(security) if f.startswith("ipcontroller-") and f.endswith(".json")]
    assert len(files) == 2, os.listdir(security)  # the client's and the engines' connection files
    for f in files:
        mode = stat.S_IMODE(os.stat(os.path.join(security, f)).st_mode)
        assert mode & 0o077 == 0, f"{f} is readable by others: {oct(mode)}"


def test_runs_work_with_ipyparallels_curve_encryption(monkeypatch):
    """IPP_ENABLE_CURVE=1: the controller generates CurveZMQ keys and every connection of
    the cluster (client, engines) is encrypted; training runs as before."""
    import json

    monkeypatch.setenv("IPP_ENABLE_CURVE", "1")
    with wb.Cluster(engines=3) as c:
        security = os.path.join(c.launched.ipp.profile_dir, "security")
        client_file = f"ipcontroller-{c.launched.ipp.cluster_id}-client.json"  # not the module fixture's
        with open(os.path.join(security, client_file)) as f:
            assert json.load(f).get("curve_serverkey"), "the controller did not enable CurveZMQ"
        for topology in (dict(strategy="multi_worker_mirrored", workers=2),
                         dict(strategy="parameter_server", workers=1, ps=1)):
            run = c.train(MLP, DIGITS, global_batch_size=64, steps=30, checkpoint_every=0, dashboard=False,
                          **topology).wait(timeout=300)
            assert run.final_step == 30 and len(run.history) >= 30
