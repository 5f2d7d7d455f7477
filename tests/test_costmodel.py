"""The cost model's formulas against numbers worked by hand (TEACHING.md's claims), and its
predictions for small scenarios whose every figure can be checked on paper."""

import math
from dataclasses import replace

import pytest

from workbench.common import costmodel as cm
from workbench.errors import ConfigError
from workbench.kernel.runs import explain

MB = 1e6
B100 = 100e6 / 8  # a 100 Mbit/s link's bytes/s, before framing


def test_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_gradients_and_barely_grows_with_n():
    assert cm.ring_bytes(MB, 1) == 0 and cm.ring_bytes(MB, 2) == MB and cm.ring_bytes(MB, 4) == 1.5 * MB
    # 1 MB over 4 workers at 100 Mbit/s and 1 ms a message: 6 x 1 ms + 1.5 MB / 12.5 MB/s
    assert cm.ring_time(MB, 4, B100, 1e-3) == pytest.approx(0.006 + 0.12)
    # bandwidth term 2(n-1)/n x S/B: 1.0x at n = 2, 1.5x at 4, 1.98x at 100: it tends to 2 S/B
    assert [round(cm.ring_time(MB, n, B100, 0) / (MB / B100), 2) for n in (2, 4, 100)] == [1.0, 1.5, 1.98]
    # two packs pay the latencies twice: packing saves (packs - 1) x 2(n-1) x alpha
    assert cm.ring_time(MB, 4, B100, 1e-3, rounds=2) - cm.ring_time(MB, 4, B100, 1e-3) == pytest.approx(0.006)


def test_a_naive_ring_costs_n_over_2_times_the_reduce_scatter_ring():
    for n in (2, 4, 8):
        assert cm.naive_ring_time(MB, n, B100) / cm.ring_time(MB, n, B100, 0) == pytest.approx(n / 2)
        assert cm.naive_ring_bytes(MB, n) == (n - 1) * MB


def test_one_parameter_server_is_n_squared_over_2_n_minus_1_slower_than_a_ring():
    # 4 workers, 1 MB each way: the PS link moves 4 MB (0.32 s), a worker's 1 MB (0.08 s)
    assert cm.ps_round_time(MB, 4, 1, B100) == pytest.approx(0.32)
    assert cm.ps_round_time(MB, 4, 2, B100) == pytest.approx(0.16)  # 2 PS tasks split it
    assert cm.ps_round_time(MB, 4, 8, B100) == pytest.approx(0.08)  # never below a worker's own link
    assert cm.ring_over_ps(4) == pytest.approx(2.667, abs=1e-3)
    assert cm.ps_round_time(MB, 4, 1, B100) / cm.ring_time(MB, 4, B100, 0) == pytest.approx(cm.ring_over_ps(4))


def test_message_bytes_at_16_and_8_bits_and_the_other_formulas():
    assert cm.message_bytes(MB) == MB and cm.message_bytes(MB, 16) == MB / 2
    assert cm.message_bytes(MB, 8, tensors=6) == 250_000 + 24  # one int8 a value, a float32 scale a tensor
    assert cm.message_bytes(10, 8, tensors=1) == 4 + 4  # 2.5 values: padded to one int32
    # a float64 model: its values sent as they are at 32 bits, as 2 and 1 bytes at 16 and 8
    assert cm.message_bytes(2 * MB, 32, value_bytes=8) == 2 * MB and cm.message_bytes(2 * MB, 16, value_bytes=8) == MB / 2
    assert cm.message_bytes(2 * MB, 8, tensors=1, value_bytes=8) == 250_000 + 4
    assert cm.gather_bytes(MB, 3) == 2 * MB
    assert cm.cut_bytes(batch=64, width=512) == 2 * 64 * 512 * 4
    assert [cm.memory_per_parameter(o) for o in ("sgd", "momentum", "adam")] == [8, 12, 16]
    assert cm.young_daly(60, 86_400) == pytest.approx(math.sqrt(2 * 60 * 86_400))
    assert cm.async_staleness(4) == 3
    # stale gradients: the largest stable rate shrinks by sin(pi / (4k + 2)) (1, 0.5, 0.22, 0.10 for k = 0, 1, 3, 7)
    assert [round(cm.stale_rate(k), 4) for k in (0, 1, 3, 7)] == [1.0, 0.5, 0.2225, 0.1045]
    assert cm.stale_rate(100) * 100 == pytest.approx(math.pi / 4, rel=0.01)
    with pytest.raises(ConfigError, match="delay"):
        cm.stale_rate(-1)
    assert cm.scaling_efficiency(8, 0.01, 0.01) == 0.5 and cm.scaling_efficiency(8, 0.01, 0.01, overlap=1) == 1
    assert cm.overlapped(0.01, 0.004, overlap=1) == 0.01 and cm.overlapped(0.01, 0.004) == pytest.approx(0.014)
    # compute-bound from the batch on which compute equals the ring's transfer: 1.5 MB at 12.5 MB/s
    # is 0.12 s, at 1 GFLOP/s 1.2e8 FLOPs, 1.2e5 examples of 1,000 FLOPs each
    assert cm.compute_bound_batch(1e3, 1e9, MB, B100, 4) == pytest.approx(1.2e5)


def links(*hosts, alpha=5e-4, rate=100_000_000, efficiency=0.95):
    return {h: cm.Link(rate / 8 * efficiency, alpha, rate) for h in hosts}


def test_a_two_host_ring_step_is_its_compute_plus_2_messages_of_half_the_model():
    s = cm.Scenario("multi_worker_mirrored", 2, MB, compute=0.005, hosts={"worker:0": "h1", "worker:1": "h2"},
                    links=links("h1", "h2"))
    p = cm.predict(s)
    B, H = B100 * 0.95, cm.RING_MESSAGE_BYTES  # each message's request and headers beside its values
    assert p["comm_time"] == pytest.approx(2 * (5e-4 + (0.5 * MB + H) / B))
    assert p["steps_per_s"] == pytest.approx(1 / (0.005 + p["comm_time"]))
    sent = MB + 2 * H
    assert p["bytes_per_step"] == {"h1": {"tx": sent, "rx": sent}, "h2": {"tx": sent, "rx": sent}}
    assert p["link_util"]["h1"] == pytest.approx(sent * p["steps_per_s"] / B)
    assert p["bottleneck"] == "network: h1" and p["why"].startswith("network-bound: h1's link carries 1 MB per step")


def test_sparse_gradients_are_gathered_beside_the_ring_of_the_dense_ones():
    """An embedding's gradient (a replica's rows and their indices, G bytes) crosses in TF's
    all-gathers, not the ring: n-1 message steps carry G each over every host's link, in 3
    gathers (the rows' count, the rows, the indices), each paying its n-1 latencies."""
    hosts = {f"worker:{i}": f"h{i}" for i in range(3)}
    mb = {h: cm.Link(1e6, 1e-3) for h in hosts.values()}  # 1 MB/s, 1 ms a message
    dense = cm.Scenario("multi_worker_mirrored", 3, 3e5, compute=0.01, hosts=hosts, links=mb)
    both = cm.predict(replace(dense, sparse=1e5))
    H = cm.RING_MESSAGE_BYTES  # each message's request and headers; a gather's message step sends 3
    ring, gathers = 4 * (1e-3 + (1e5 + H) / 1e6), 2 * ((1e5 + 3 * H) / 1e6 + 3 * 1e-3)
    assert cm.predict(dense)["comm_time"] == pytest.approx(ring)  # 2(n-1) messages of S/n
    assert both["comm_time"] == pytest.approx(ring + gathers)
    assert both["steps_per_s"] == pytest.approx(1 / (0.01 + ring + gathers))
    sent = 4 * (1e5 + H) + 2 * (1e5 + 3 * H)
    assert both["bytes_per_step"]["h1"] == {"tx": pytest.approx(sent), "rx": pytest.approx(sent)}
    assert both["latency_time"] == pytest.approx(4e-3 + 2 * 3 * 1e-3)
    # only sparse gradients: no ring of dense ones, nor its latencies
    alone = cm.predict(replace(dense, model_bytes=0.0, tensors=0, sparse=1e5))
    assert alone["comm_time"] == pytest.approx(gathers)


def test_packing_counts_tfs_own_packs_and_each_pack_pays_its_messages_latencies():
    """``packs`` groups tensors as TF's ``group_by_size`` does (checked against TF itself),
    and a ring of k packs pays k x 2(n-1) latencies for the same bytes (claim 7: packing
    removes (packs - 1) x 2(n-1) x alpha)."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.distribute import cross_device_utils

    rng = np.random.default_rng(0)
    for trial in range(20):
        elements = [int(e) for e in rng.integers(1, 5000, size=int(rng.integers(1, 12)))]
        tensors = [tf.zeros([e]) for e in elements]
        for per_pack in (0, 1, 100, 4_000, 20_000, 10**9):
            tf_packs = cross_device_utils.group_by_size(list(reversed(tensors)), per_pack)  # TF packs the last first
            assert cm.packs([4.0 * e for e in elements], per_pack) == len(tf_packs), (elements, per_pack)
    assert cm.packs([1e3] * 16, 1) == 16 and cm.packs([1e3] * 16, 0) == 1 and cm.packs([], 1) == 1
    hosts = {f"worker:{i}": f"h{i}" for i in range(4)}
    one = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, hosts, links(*hosts.values())))
    six = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, hosts, links(*hosts.values()), packs=6))
    H, B = cm.RING_MESSAGE_BYTES, B100 * 0.95  # each message its request and headers, the same values' bytes
    assert six["comm_time"] - one["comm_time"] == pytest.approx(5 * 2 * 3 * (5e-4 + H / B))
    assert six["latency_time"] == pytest.approx(6 * one["latency_time"])
    assert six["bytes_per_step"]["h1"]["tx"] - one["bytes_per_step"]["h1"]["tx"] == pytest.approx(5 * 2 * 3 * H)
    local = {"worker:0": "local", "worker:1": "local"}
    loop = cm.Link(0.8e9, 1.5e-3)
    one = cm.predict(cm.Scenario("multi_worker_mirrored", 2, MB, 0.005, local, loopback=loop))
    many = cm.predict(cm.Scenario("multi_worker_mirrored", 2, MB, 0.005, local, loopback=loop, packs=16))
    assert many["comm_time"] - one["comm_time"] == pytest.approx(15 * 2 * (1.5e-3 + 2 * H / 0.8e9))  # 2 workers' at once
    # 8-bit messages are gathered as one tensor: no packs
    eight = cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, hosts, links(*hosts.values()), bits=8)
    assert cm.predict(eight) == cm.predict(cm.Scenario(**{**eight.__dict__, "packs": 6}))


def test_workers_sharing_a_host_send_only_what_crosses_to_another_host():
    # ring 0 -> 1 -> 2 -> 3 -> 0: only 1 -> 2 and 3 -> 0 cross; each host sends one chunk a ring step
    hosts = {"worker:0": "h1", "worker:1": "h1", "worker:2": "h2", "worker:3": "h2"}
    p = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, hosts, links("h1", "h2")))
    H = cm.RING_MESSAGE_BYTES  # a message's request and headers, beside its values
    assert p["bytes_per_step"]["h1"]["tx"] == pytest.approx(cm.ring_bytes(MB, 4) + 6 * H)
    # int8 is gathered: (n-1) messages of the whole quantized model around the same ring
    p8 = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, hosts, links("h1", "h2"), bits=8))
    q8 = cm.message_bytes(MB, 8, tensors=1) + 4 * H  # and the 3 other gathers' messages
    assert p8["bytes_per_step"]["h1"]["tx"] == pytest.approx(3 * q8)
    # and its time: 3 ring steps carrying the bytes, each after a latency, then 3 gathers more
    # of latency only (the scales; each gather's shapes first): 4 x 3 latencies in all
    B, alpha = B100 * 0.95, 5e-4
    assert p8["comm_time"] == pytest.approx(3 * (alpha + q8 / B) + 3 * 3 * alpha)
    assert p8["latency_time"] == pytest.approx(4 * 3 * alpha)
    # every worker on one host, its loopback free: nothing crosses, nothing waits (8 bits too)
    alone8 = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, dict.fromkeys(hosts, "h1"), {}, bits=8))
    assert alone8["comm_time"] == 0 and alone8["bottleneck"] == "compute"
    p16 = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, hosts, links("h1", "h2"), bits=16))
    assert p16["bytes_per_step"]["h1"]["tx"] == pytest.approx(cm.ring_bytes(MB, 4) / 2 + 6 * H)
    same = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, dict.fromkeys(hosts, "h1"), links("h1")))
    assert same["bytes_per_step"] == {} and same["comm_time"] == 0 and same["bottleneck"] == "compute"


def test_a_parameter_servers_link_carries_n_times_a_workers_and_flattens_the_rate():
    B = B100 * 0.95

    def ps_run(n, ps=1):
        hosts = {"chief:0": "h0", **{f"ps:{j}": f"p{j}" for j in range(ps)}, **{f"worker:{i}": f"w{i}" for i in range(n)}}
        return cm.predict(cm.Scenario("parameter_server", n, MB, 0.005, hosts,
                                      links(*set(hosts.values())), ps=ps))

    one, two, three = ps_run(1), ps_run(2), ps_run(3)
    # one worker: compute, 1 MB pulled, then 1 MB pushed, one message latency each (measured
    # on the bed: 1.82-1.92 steps/s through 5 Mbit links of 0.15 MB a step each way; at
    # once, as the bed's old bucket let them, would be 3.75)
    assert one["steps_per_s"] == pytest.approx(1 / (0.005 + 2 * MB / B + 2 * 5e-4))
    assert one["link_util"]["w0"] == pytest.approx(one["steps_per_s"] * MB / B) and one["link_util"]["w0"] < 0.5
    for p, n in ((one, 1), (two, 2), (three, 3)):
        assert p["bytes_per_step"]["p0"]["tx"] == pytest.approx(MB)  # every global step pulls the model
        assert p["bytes_per_step"]["w0"]["tx"] == pytest.approx(MB / n)  # a worker does 1/n of the steps
    # with equal links one worker uses each way of the PS link half the time (less its
    # compute and latency): two fill it, one pulling while the other pushes, and the PS
    # link's rate bounds the rate from there on
    assert 0.45 < one["link_util"]["p0"] < 0.5
    assert two["steps_per_s"] == pytest.approx(2 / (0.005 + 2 * MB / B + 2 * 5e-4))  # all but compute
    assert two["steps_per_s"] < B / MB
    assert three["steps_per_s"] == pytest.approx(B / MB)
    assert three["link_util"]["p0"] == pytest.approx(1.0) and three["bottleneck"] == "network: p0"
    assert three["ps_load"]["ps:0"] == pytest.approx(B)
    split = ps_run(3, ps=2)  # two PS tasks each serve half the variables: twice the links' bound,
    assert split["bytes_per_step"]["p0"]["tx"] == pytest.approx(MB / 2)  # now above the workers' own
    assert split["steps_per_s"] == pytest.approx(3 / (0.005 + 2 * MB / B + 2 * 5e-4))
    assert split["steps_per_s"] < 2 * B / MB
    assert split["steps_per_s"] > 1.4 * three["steps_per_s"] and split["link_util"]["p0"] < 1
    # a PS link twice as fast as the workers' is a quarter used by one worker
    fast = cm.predict(cm.Scenario("parameter_server", 1, MB, 0.0, {"ps:0": "p0", "worker:0": "w0"},
                                  {"p0": cm.Link(2 * B, 0.0, 2 * 10**8), "w0": cm.Link(B, 0.0, 10**8)}, ps=1))
    assert fast["steps_per_s"] == pytest.approx(B / MB / 2) and fast["link_util"]["p0"] == pytest.approx(0.25)


def test_asynchronous_workers_each_step_at_their_own_pace_a_slow_link_slows_only_its_worker():
    """09's straggler: worker:1 on a 20 Mbit link beside worker:0 and the PS at 1 Gbit. A
    parameter-server run's workers do not wait for one another: the rate is the sum of each
    worker's pace (it once was 2 / the slow worker's step time: 09's run read 2.46x that),
    each link carries its worker's share of the global steps, the PS link all of them."""
    hosts = {"chief:0": "h0", "ps:0": "p0", "worker:0": "w0", "worker:1": "w1"}
    nets = {**links("h0", "p0", "w0", rate=10**9), **links("w1", rate=20 * 10**6)}
    p = cm.predict(cm.Scenario("parameter_server", 2, MB, 0.005, hosts, nets, ps=1))
    fast, slow = (0.005 + 2 * MB / (r / 8 * 0.95) + 2 * 5e-4 for r in (10**9, 20 * 10**6))
    assert p["steps_per_s"] == pytest.approx(1 / fast + 1 / slow)
    assert p["step_time"] == pytest.approx(2 / (1 / fast + 1 / slow))  # the mean over steps
    share = (1 / slow) / (1 / fast + 1 / slow)
    assert p["bytes_per_step"]["w1"]["rx"] == pytest.approx(MB * share)
    assert p["bytes_per_step"]["w0"]["rx"] == pytest.approx(MB * (1 - share))
    assert p["bytes_per_step"]["p0"]["tx"] == pytest.approx(MB)
    assert p["link_util"]["w1"] == pytest.approx(p["steps_per_s"] * share * MB / (20e6 / 8 * 0.95))
    even = cm.predict(cm.Scenario("parameter_server", 2, MB, 0.005, hosts, links(*set(hosts.values())), ps=1))
    assert even["steps_per_s"] == pytest.approx(2 / (0.005 + 2 * MB / (B100 * 0.95) + 2 * 5e-4))  # equal: n / t


def test_each_variable_a_parameter_server_holds_adds_its_request_and_headers_to_its_link():
    """Measured on the bed: a PS task costs a worker step bytes beyond its values, each way:
    ``PS_TASK_BYTES``, ``PS_VARIABLE_BYTES`` a variable, and a call of ``steps_per_call``
    steps ``PS_CALL_BYTES`` + ``PS_CALL_VARIABLE_BYTES`` a variable. Worked by hand: 2 PS
    tasks, 0.99 and 0.01 of 1 MB, holding 3 variables each, calls of 10 steps."""
    B = B100 * 0.95
    hosts = {"chief:0": "h0", "ps:0": "p0", "ps:1": "p1", "worker:0": "w0", "worker:1": "w1"}
    s = cm.Scenario("parameter_server", 2, MB, 0.005, hosts, links(*set(hosts.values())), ps=2,
                    ps_shares={"ps:0": 0.99, "ps:1": 0.01}, ps_variables={"ps:0": 3, "ps:1": 3})
    assert s.steps_per_call == 10
    p = cm.predict(s)
    extra = cm.PS_TASK_BYTES + 3 * cm.PS_VARIABLE_BYTES + (cm.PS_CALL_BYTES + 3 * cm.PS_CALL_VARIABLE_BYTES) / 10
    back = extra  # the pull's requests and responses, the push's
    assert extra == 2330  # 1,000 + 3 x 350 + (1,000 + 3 x 600) / 10
    assert p["bytes_per_step"]["p1"] == {"tx": pytest.approx(0.01 * MB + extra),  # 1.2x the values alone
                                         "rx": pytest.approx(0.01 * MB + back)}
    assert p["bytes_per_step"]["p0"]["rx"] == pytest.approx(0.99 * MB + back)
    assert p["bytes_per_step"]["w0"] == {"tx": pytest.approx((MB + 2 * back) / 2),  # half the global steps
                                         "rx": pytest.approx((MB + 2 * extra) / 2)}
    # a worker's pull and push each move both PS tasks' bytes over its own link, one way each
    assert p["steps_per_s"] == pytest.approx(2 / (0.005 + (2 * MB + 2 * extra + 2 * back) / B + 2 * 5e-4))
    assert p["ps_load"]["ps:1"] == pytest.approx(p["steps_per_s"] * (0.01 * MB + extra))
    # calls of 2 steps: each step carries a fifth of its call's bytes instead of a tenth
    two = cm.predict(replace(s, steps_per_call=2))["bytes_per_step"]["p1"]["tx"]
    call = cm.PS_CALL_BYTES + 3 * cm.PS_CALL_VARIABLE_BYTES
    assert two - p["bytes_per_step"]["p1"]["tx"] == pytest.approx(call * (1 / 2 - 1 / 10))
    # a PS task that holds only the optimizer's variables still serves them
    lone = cm.predict(replace(s, ps_shares={"ps:0": 1.0}, ps_variables={"ps:0": 4, "ps:1": 1}))
    assert lone["bytes_per_step"]["p1"]["tx"] == pytest.approx(1000 + 350 + (1000 + 600) / 10)
    assert cm.predict(replace(s, ps_variables={}))["bytes_per_step"]["p1"]["tx"] == pytest.approx(0.01 * MB)


def test_a_links_counters_read_its_payload_in_frames_and_the_acks_of_what_it_receives():
    """1,448 payload bytes a 1,514-byte frame, and a 66-byte ACK every 2 segments received:
    a ring's 1 MB each way reads 1.0456 + 0.0228 = 1.068 MB on each link's counters (the
    bed's rings: 1.053-1.12, median 1.07); the payload stays in ``bytes_per_step``."""
    assert cm.wire_bytes(1448, 0) == 1514 and cm.wire_bytes(0, 2 * 1448) == 66
    assert cm.wire_bytes(MB, MB) == pytest.approx(MB * 1.0684, rel=1e-4)
    hosts = {"worker:0": "h1", "worker:1": "h2"}
    p = cm.predict(cm.Scenario("multi_worker_mirrored", 2, MB, 0.01, hosts, links("h1", "h2")))
    sent = MB + 2 * cm.RING_MESSAGE_BYTES  # and its 2 messages' requests and headers
    assert p["bytes_per_step"]["h1"] == {"tx": sent, "rx": sent}
    assert p["wire_bytes_per_step"]["h1"] == {"tx": cm.wire_bytes(sent, sent), "rx": cm.wire_bytes(sent, sent)}
    # one way only (a PS task's pull responses, say): no ACKs of its own to send
    assert cm.wire_bytes(MB, 0) / MB == pytest.approx(1514 / 1448)


def test_compressed_messages_cost_their_casts_and_quantizing_on_the_workers_cpu():
    """``codec_time``, as fitted on the bed's rings (4-tensor MLPs): a 4 MB model's 8-bit
    messages 4 x 0.25 ms + 4e6 x 1.6 ns = 7.4 ms a step (measured 5.5-10.0 ms), its 16-bit
    ones 0.4 ms, 32-bit none."""
    assert cm.codec_time(4e6, 8, tensors=4) == pytest.approx(7.4e-3)
    assert cm.codec_time(4e6, 16, tensors=4) == pytest.approx(0.4e-3) and cm.codec_time(4e6, 32, tensors=4) == 0


def test_a_parameter_server_worker_pulls_an_embeddings_table_whole_and_pushes_its_rows():
    """Measured on the bed (100 Mbit, 20,000 x 32 table, 512 rows a step): the PS link sent
    the table, 0.997 of the model, and received the rows, 0.977; one worker's steps/s 1.08
    of the model's (1.95 when the table was counted both ways). Worked by hand: the pull
    moves 2.56 MB, the push 67,584 bytes, one after the other; the anatomy's compute holds
    the pull, its communication the push."""
    B = B100 * 0.95
    hosts = {"chief:0": "h0", "ps:0": "p0", "worker:0": "w0"}
    table, rows = 2_560_000, 67_584
    s = cm.Scenario("parameter_server", 1, 0.0, 0.01, hosts, links(*set(hosts.values())), ps=1,
                    ps_sparse={"ps:0": (table, rows)})
    p = cm.predict(s)
    assert p["bytes_per_step"]["p0"] == {"tx": table, "rx": rows}
    assert p["bytes_per_step"]["w0"] == {"tx": rows, "rx": table}
    assert p["steps_per_s"] == pytest.approx(1 / (0.01 + table / B + rows / B + 2 * 5e-4))
    assert p["compute_time"] == pytest.approx(0.01 + table / B + 5e-4) and p["comm_time"] == pytest.approx(rows / B + 5e-4)


def test_workers_sharing_cores_compute_longer_and_the_model_says_so():
    hosts = {f"worker:{i}": "local" for i in range(4)}
    # measured: 6 ms a step with 2 workers on 2 cores, so 6 ms alone too; 4 workers: 12 ms
    p = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.006, hosts, cores=2, compute_workers=2))
    assert p["compute_time"] == pytest.approx(0.012) and p["cpu_wait"] == pytest.approx(0.006)
    assert "its 4 workers share 2 cores: compute x2.00 of one alone" in p["why"]
    single = cm.predict(cm.Scenario("single", 1, MB, 0.002, {"worker:0": "local"}, input=0.001, other=0.003))
    assert single["steps_per_s"] == pytest.approx(1 / 0.006) and single["bottleneck"] == "overhead"


def test_a_parameter_server_runs_compute_is_its_measured_compute_without_its_pulls():
    """The anatomy times a PS worker's pulls inside its compute; ``run.explain()`` takes
    them out with ``without_pulls``: the compute at which the model counts what was
    measured, pulls slowed by the links that compute loads. Round trips, unloaded and
    link-bound alike (a base of compute 0 once took 63 ms out where the pull took 32)."""
    B = 20e6 / 8 * 0.95
    for n, compute in ((1, 0.1), (2, 0.1), (3, 0.1), (3, 0.005)):
        hosts = {"chief:0": "h0", "ps:0": "p0", **{f"worker:{i}": f"w{i}" for i in range(n)}}
        s = cm.Scenario("parameter_server", n, 150e3, compute, hosts,
                        {h: cm.Link(B, 5e-4, 20_000_000) for h in set(hosts.values())}, ps=1, input=0.002)
        measured = cm.predict(s)["compute_time"]
        assert measured > compute and explain.without_pulls(s, measured) == pytest.approx(compute, rel=1e-6), (n, compute)
    assert explain.without_pulls(s, 0.001) == 0.0  # less than the pull alone: no compute left


def test_a_split_models_step_is_its_compute_plus_each_cuts_activations_then_their_gradients():
    """Two stages on two hosts, one 256-wide cut at batch 64: 65,536 bytes forward (plus the
    256 bytes of labels, which leave with the batch and add no latency of their own) and as
    many back, one after the other, each crossing one link each way; the cut's requests and
    headers beside them (``CUT_STEP_BYTES``)."""
    hosts = {"chief:0": "h0", "worker:0": "h1", "worker:1": "h2"}
    act = cm.cut_bytes(64, 256) / 2
    s = cm.Scenario("model_parallel", 2, 0.0, compute=0.002, hosts=hosts, links=links("h0", "h1", "h2"),
                    cuts=(act,), label_bytes=256, cores=2, compute_workers=1)
    p = cm.predict(s)
    B = B100 * 0.95
    assert act == 65_536
    assert p["comm_time"] == pytest.approx(2 * (5e-4 + act / B) + 256 / B)
    assert p["steps_per_s"] == pytest.approx(1 / (0.002 + p["comm_time"]))
    # and the cut's requests and headers, each way on both links, in bytes, not time
    call = cm.CUT_STEP_BYTES
    assert p["bytes_per_step"] == {"h1": {"tx": act + 256 + call, "rx": act + call},
                                   "h2": {"tx": act + call, "rx": act + 256 + call}}
    # each link carries one way at a time: at most half of it is used, each way
    assert p["link_util"]["h1"] == pytest.approx((act + 256 + call) * p["steps_per_s"] / B) and p["link_util"]["h1"] < 0.5
    assert p["cpu_wait"] == 0 and p["compute_time"] == 0.002  # the stages compute one after the other
    assert p["bottleneck"] == "network: h1"
    # both stages on one host (loopback taken as free): nothing crosses
    same = cm.predict(cm.Scenario("model_parallel", 2, 0.0, 0.002, dict.fromkeys(hosts, "h1"), links("h1"),
                                  cuts=(act,)))
    assert same["comm_time"] == 0 and same["bytes_per_step"] == {}


def test_a_paths_cpu_per_byte_is_paid_in_series_with_its_wire_and_stretched_by_shared_cores():
    """``Link.cpu_per_byte``: each message's bytes cost their ends' CPU besides the wire,
    one after the other, x max(1, workers / cores) when the run's workers share the cores."""
    hosts = {f"worker:{i}": f"h{i}" for i in range(4)}
    c, alpha = 5e-9, 2e-3
    shaped = {h: cm.Link(B100, alpha, rate=100_000_000, cpu_per_byte=c) for h in hosts.values()}
    p = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, hosts, shaped, cores=2))
    chunk = MB / 4 + cm.RING_MESSAGE_BYTES  # 6 ring steps of S/n and a message's headers, each its latency,
    # its wire and 2 x its CPU (4 workers, 2 cores)
    assert p["comm_time"] == pytest.approx(6 * (alpha + chunk / B100 + chunk * c * 2))
    alone = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, hosts, shaped))  # each host its own cores
    assert alone["comm_time"] == pytest.approx(6 * (alpha + chunk / B100 + chunk * c))
    # an unshaped path's wire is free: its CPU alone (a calibrated loopback or veth). One
    # machine's loopback carries its 4 workers' chunks at once, their CPU spread over its 2
    # cores: 4 chunks x c / 2 cores, the same stretch x2 a host's own chunk has above
    local = dict.fromkeys(hosts, "local")
    loop = cm.Link(math.inf, alpha, cpu_per_byte=c)
    q = cm.predict(cm.Scenario("multi_worker_mirrored", 4, MB, 0.005, local, loopback=loop, cores=2))
    assert q["comm_time"] == pytest.approx(6 * (alpha + 4 * chunk * c / 2))
    assert q["comm_time"] == pytest.approx(p["comm_time"] - 6 * chunk / B100)  # the shaped ring less its wire
    assert loop.payload_rate() == pytest.approx(1 / c) and cm.Link(math.inf, alpha).payload_rate() == math.inf


def test_a_calibrated_path_replaces_the_models_constants_on_the_machine_that_measured_it(tmp_path, monkeypatch):
    from workbench.store import calibration

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    assert calibration.read() == {} and explain.loopback() == explain.LOOPBACK
    assert explain.link_of(None) == explain.UNSHAPED_VETH and explain.link_of(100_000_000).cpu_per_byte == 0
    calibration.write("veth", {"alpha_s": 6e-4, "cpu_s_per_byte": 3e-9})
    calibration.write("loopback", {"alpha_s": 5e-4, "cpu_s_per_byte": 2e-9})
    assert explain.loopback() == cm.Link(math.inf, 5e-4, cpu_per_byte=2e-9)
    assert explain.link_of(None) == cm.Link(math.inf, 6e-4, cpu_per_byte=3e-9)
    shaped = explain.link_of(100_000_000)
    assert shaped.alpha == 6e-4 and shaped.cpu_per_byte == explain.SHAPED_CPU_PASSES * 3e-9
    assert shaped.bytes_per_s == 100e6 / 8 * explain.SHAPED_EFFICIENCY
    # a calibration whose figures are not positive is not taken (a drowned measurement)
    calibration.write("loopback", {"alpha_s": 5e-4, "cpu_s_per_byte": 0.0})
    assert explain.loopback() == explain.LOOPBACK
    # another machine's file is not this one's
    record = calibration.files.read_json(calibration.path())
    calibration.files.write_json(calibration.path(), {**record, "machine": "another CPU x 64 cores"})
    assert calibration.read() == {} and explain.loopback() == explain.LOOPBACK
    with pytest.raises(ValueError, match="unknown path"):
        calibration.write("wifi", {})


def test_the_title_names_each_kind_of_path_a_run_crosses_and_where_its_latency_comes_from():
    hosts = {"worker:0": "h1", "worker:1": "h1", "worker:2": "h2"}  # two workers share h1: its loopback too
    veth, constant = cm.Link(math.inf, 6e-4, cpu_per_byte=3e-9), cm.Link(12.5e6, 2e-3, rate=100_000_000)
    s = cm.Scenario("multi_worker_mirrored", 3, 1e6, 0.01, hosts, links={"h1": veth, "h2": veth},
                    loopback=explain.LOOPBACK)
    assert cm.paths(s) == {"h1:lo", "h1", "h2"}
    assert explain._paths_note(s) == ("; veth latency and CPU per byte: this machine's wb.calibrate_links"
                                      "; loopback latency: the model's constant (wb.calibrate_links(cluster) "
                                      "measures this machine's)")
    both = replace(s, loopback=cm.Link(math.inf, 5e-4, cpu_per_byte=2e-9))
    assert explain._paths_note(both) == "; loopback and veth latency and CPU per byte: this machine's wb.calibrate_links"
    shaped = replace(s, links={"h1": constant, "h2": constant}, loopback=explain.LOOPBACK)
    assert explain._paths_note(shaped).startswith("; loopback and veth latency: the model's constant")
    assert explain._paths_note(s, latency=5e-5) == "; latency 0.05 ms a message, as asked"
    assert explain._paths_note(replace(s, hosts=dict.fromkeys(hosts, "h1"), loopback=None)) == ""
