"""Roles, ports, TF_CONFIG and environment from engine inventories: pure, no TF, no hosts."""

import json

import pytest

from workbench.common import roles, strategies


def engines_on(layout, gpus_per_host=0):
    """``layout``: {host: engine count}; engine ids are handed out host by host."""
    out, eid = [], 0
    for h, (host, n) in enumerate(layout.items()):
        for _ in range(n):
            out.append(roles.EngineInfo(
                id=eid, host=host, address=f"10.0.0.{h + 1}", pid=1000 + eid,
                port=5000 + eid, gpus=tuple(range(gpus_per_host)),
            ))
            eid += 1
    return out


def plan(engines, strategy, workers, ps=0):
    a = strategies.spec(strategy)
    return roles.plan(engines, a.roles, workers, ps, a.multi_engine)


def test_two_hosts_four_gpus_each_pin_one_gpu_per_engine():
    engines = engines_on({"a": 4, "b": 4}, gpus_per_host=4)
    env = roles.engine_env(engines, "t")
    assert [env[e.id]["CUDA_VISIBLE_DEVICES"] for e in engines] == ["0", "1", "2", "3"] * 2
    assert all(env[e.id]["GRPC_FAIL_FAST"] == "use_caller" for e in engines)
    assert len({env[e.id]["TMPDIR"] for e in engines}) == 8


def test_more_engines_than_gpus_leaves_extras_on_cpu():
    engines = engines_on({"a": 3}, gpus_per_host=2)
    env = roles.engine_env(engines, "t")
    assert [env[e.id]["CUDA_VISIBLE_DEVICES"] for e in engines] == ["0", "1", ""]


def test_cpu_hosts_get_no_cuda_visible_devices():
    env = roles.engine_env(engines_on({"a": 2}), "t")
    assert all("CUDA_VISIBLE_DEVICES" not in e for e in env.values())


def test_local_ranks_follow_engine_ids_per_host_even_when_interleaved():
    engines = [roles.EngineInfo(i, h, h, i, 1) for i, h in enumerate("abab")]
    assert roles.local_ranks(engines) == {0: 0, 1: 0, 2: 1, 3: 1}


def test_three_uneven_hosts_spread_workers_and_build_one_cluster_spec():
    engines = engines_on({"a": 3, "b": 1, "c": 2})
    tasks = plan(engines, "multi_worker_mirrored", workers=4)
    assert [t.host for t in tasks] == ["a", "b", "c", "a"]
    assert [(t.role, t.index) for t in tasks] == [("worker", i) for i in range(4)]
    spec = tasks[0].tf_config["cluster"]
    assert spec == {"worker": ["10.0.0.1:5000", "10.0.0.2:5003", "10.0.0.3:5004", "10.0.0.1:5001"]}
    assert all(t.tf_config["cluster"] == spec for t in tasks)
    assert [json.loads(t.tf_config_json)["task"]["index"] for t in tasks] == [0, 1, 2, 3]


def test_parameter_server_plan_has_chief_ps_and_workers():
    tasks = plan(engines_on({"a": 5}), "parameter_server", workers=2, ps=2)
    assert [(t.role, t.index, t.engine_id) for t in tasks] == [
        ("chief", 0, 0), ("ps", 0, 1), ("ps", 1, 2), ("worker", 0, 3), ("worker", 1, 4)]
    cluster = tasks[0].tf_config["cluster"]
    assert set(cluster) == {"chief", "ps", "worker"}
    assert len(cluster["ps"]) == 2 and len(cluster["worker"]) == 2 and len(cluster["chief"]) == 1
    assert tasks[3].target == "10.0.0.1:5003"


@pytest.mark.parametrize("strategy", ["single", "mirrored"])
def test_local_strategies_use_one_engine_without_tf_config(strategy):
    (task,) = plan(engines_on({"a": 3}), strategy, workers=1)
    assert task.role == "local" and task.tf_config == {} and task.tf_config_json == ""


def test_same_topology_reuses_engines_different_topology_recycles_them():
    engines = engines_on({"a": 4})
    first = plan(engines, "multi_worker_mirrored", workers=2)
    state = {t.engine_id: roles.fingerprint(t) for t in first}
    assert roles.engines_to_recycle(plan(engines, "multi_worker_mirrored", workers=2), state) == []
    # three workers: the cluster spec changes, so both engines with MWMS state must go
    assert roles.engines_to_recycle(plan(engines, "multi_worker_mirrored", workers=3), state) == [0, 1]
    # a local run on engine 0 after MWMS: its collective state is process-global
    assert roles.engines_to_recycle(plan(engines, "single", workers=1), state) == [0]
    # fresh engines are never recycled
    assert roles.engines_to_recycle(plan(engines, "parameter_server", workers=1, ps=1), {}) == []


def test_best_plan_prefers_engines_that_already_hold_the_right_state():
    engines = engines_on({"a": 4})
    first = plan(engines[2:], "multi_worker_mirrored", workers=2)  # a run on engines 2, 3
    state = {t.engine_id: roles.fingerprint(t) for t in first}
    a = strategies.spec("multi_worker_mirrored")
    again = roles.best_plan(engines, state, [2, 3], a.roles, 2, 0, a.multi_engine)
    assert [t.engine_id for t in again] == [2, 3]
    assert roles.engines_to_recycle(again, state) == []
    # a local run goes to a fresh engine rather than restarting one
    s = strategies.spec("single")
    local = roles.best_plan(engines, state, None, s.roles, 1, 0, s.multi_engine)
    assert local[0].engine_id == 0 and roles.engines_to_recycle(local, state) == []


def test_a_cluster_on_a_network_warns_once_about_tf_servers_and_loopback_does_not():
    import warnings

    from workbench.kernel.engines.pool import warn_if_exposed

    EngineInfo = roles.EngineInfo
    local = [EngineInfo(id=i, host="a", address="127.0.0.1", pid=i, port=1000 + i) for i in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_exposed(local) is False
    remote = local + [EngineInfo(id=5, host="b", address="10.1.2.3", pid=5, port=1005)]
    with pytest.warns(UserWarning, match=r"reached on 10\.1\.2\.3\. TensorFlow's gRPC servers listen on every "
                                         r"interface.*private network, or behind a firewall"):
        assert warn_if_exposed(remote) is True


def test_a_collective_group_is_reused_whole_or_not_at_all():
    engines = [roles.EngineInfo(id=i, host="a", address="127.0.0.1", pid=i, port=1000 + i) for i in range(3)]
    group = roles.plan(engines[:2], ("worker",), workers=2, ps=0, multi_engine=True)
    state = {t.engine_id: roles.fingerprint(t) for t in group}
    assert roles.engines_to_recycle(group, state) == []
    # engine 0 replaced by a fresh engine 2 on the same port: same TF_CONFIG, but engine 1's
    # group state knows the old process, so it must go too
    moved = [roles.Task(2, t.role, t.index, t.host, t.target, t.tf_config) if t.engine_id == 0 else t for t in group]
    assert roles.engines_to_recycle(moved, {1: state[1], 2: None}) == [1]
    # parameter-server tasks are servers a new coordinator can reuse one by one
    ps = roles.plan(engines, ("chief", "ps", "worker"), workers=1, ps=1, multi_engine=True)
    ps_state = {t.engine_id: roles.fingerprint(t) for t in ps}
    assert roles.engines_to_recycle(ps, {**ps_state, 0: None}) == []


def test_tf_ports_come_from_below_the_ephemeral_range_so_no_outgoing_connection_holds_them():
    import socket

    from workbench.engine.startup import inventory

    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    ports = {inventory.free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports), ports
    for p in ports:  # free on every interface, as TF's server needs
        with socket.socket() as s:
            s.bind(("", p))


def test_a_topology_run_again_after_its_engines_were_replaced_keeps_them():
    """One engine per host; the run's engines were replaced (recycled from another
    topology), each new one on its old one's host and port, but with ids in another order
    than the hosts'. Run again, the same topology must land on the same engines: spreading
    over hosts ordered by engine id put the chief elsewhere, and every parameter-server
    re-run across hosts restarted all its engines (~20 s each over SSH)."""
    a = strategies.spec("parameter_server")
    old = [roles.EngineInfo(i, h, f"10.0.0.{i + 1}", i, 5000 + i) for i, h in enumerate(["h2", "h4", "h3", "h1"])]
    tasks = roles.plan(old, a.roles, 1, 2, a.multi_engine)
    new_id = {0: 6, 1: 5, 2: 4, 3: 7}  # as the replacements registered
    new = [roles.EngineInfo(new_id[e.id], e.host, e.address, 100 + e.id, e.port) for e in old]
    ran = [roles.Task(new_id[t.engine_id], t.role, t.index, t.host, t.target, t.tf_config) for t in tasks]
    state = {t.engine_id: roles.fingerprint(t) for t in ran}
    again = roles.best_plan(new, state, [t.engine_id for t in ran], a.roles, 1, 2, a.multi_engine)
    assert roles.engines_to_recycle(again, state) == []
    assert [(t.name, t.engine_id) for t in again] == [(t.name, t.engine_id) for t in ran]
