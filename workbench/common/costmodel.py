"""The cost model: what a distributed training step should cost, predicted from the model's
bytes, where each task runs, each link's rate and latency, and a worker's compute.

Pure functions, no TensorFlow: ``run.explain()`` puts each prediction beside what the run
measured, ``wb.predict(...)`` answers for runs not made. The formulas first, each as the
teaching references write it (``TEACHING.md`` numbers them); then ``predict``, which
composes them for one scenario.

Notation: S = the bytes of one worker's gradients as sent (the model's trainable bytes at
the message's precision), n = workers, k = parameter-server tasks, B = a link's payload
bandwidth (bytes/s, each direction: links are full duplex), alpha = per-message latency
(s), C = a worker's compute per step (s).

What the model leaves out, on purpose: added network latency, jitter and loss (the test
bed cannot emulate them: no netem here), compute overlapping communication (TF's
collectives here start after the whole backward pass; the workbench's steps do not
overlap them), and contention other than for links and cores.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from workbench.common import strategies
from workbench.common.formulas import (  # noqa: F401 - claims 2-4, 9, 11, 12, as costmodel.* too
    OPTIMIZER_BYTES, async_staleness, memory_per_parameter, naive_ring_bytes, naive_ring_time, ps_round_time,
    ring_over_ps, stale_rate, young_daly)
from workbench.common.scenario import Link, Scenario  # noqa: F401 - what predict() takes, as costmodel.* too

# -- bytes ------------------------------------------------------------------------------------


def message_bytes(model_bytes: float, bits: int = 32, tensors: int = 0, value_bytes: float = 4) -> float:
    """The bytes of a model's gradients (``value_bytes`` a value: 4 for float32, 8 for
    float64) sent at ``bits`` per value: at 32, as they are; 16-bit messages halve float32's,
    8-bit quarter them (claim 8: Zhang et al. 2020; Horovod's fp16), plus, at 8 bits, a
    float32 scale per tensor and padding to whole int32s (``engine/compression.py``)."""
    if bits == 32:
        return model_bytes
    values = model_bytes / value_bytes
    if bits == 8:
        return math.ceil(values / 4) * 4 + 4 * tensors
    return values * bits / 8


def ring_bytes(S: float, n: int) -> float:
    """Bytes each rank sends (and receives) in one ring all-reduce of S bytes: 2(n-1)/n x S,
    a reduce-scatter then an all-gather of n chunks of S/n (claim 1: NCCL's busbw, d2l)."""
    return 2 * (n - 1) / n * S if n > 1 else 0.0


def gather_bytes(S: float, n: int) -> float:
    """Bytes each rank receives (and sends, around a ring) in an all-gather of S bytes from
    every rank: (n-1) x S. The workbench's 8-bit messages are gathered, not summed (a sum
    of int8 overflows): at n = 2 the same bytes as an all-reduce of S, n/2 times more beyond."""
    return (n - 1) * S


def cut_bytes(batch: int, width: int, dtype_bytes: int = 4) -> float:
    """Bytes crossing a model-parallel cut per step: the activations forward and their
    gradients back, 2 x batch x width x dtype bytes (DistBelief: a bad split floods the network)."""
    return 2.0 * batch * width * dtype_bytes


# A host link's counters count frames: TCP sends MSS payload bytes in a FRAME-byte Ethernet frame
# (MTU 1500: 32 bytes of TCP with timestamps, 20 of IP, 14 of Ethernet), and its receiver returns
# an ACK-byte frame every 2 segments (delayed ACKs) on its own link. The bed's rings read
# 1.053-1.12 x their payload, median 1.07 (bench/results/predict-s52.md); a jumbo-frame link less.
MSS, FRAME, ACK = 1448, 1514, 66


def wire_bytes(sent: float, received: float) -> float:
    """The bytes a host link's counters read for ``sent`` payload bytes out while ``received``
    come in: sent x FRAME / MSS in frames, and the ACKs of what it receives, one ACK frame
    per 2 segments: sent x 1.046 + received x 0.023."""
    return sent * FRAME / MSS + received / (2 * MSS) * ACK


# -- time -------------------------------------------------------------------------------------


def ring_time(S: float, n: int, B: float, alpha: float, rounds: int = 1) -> float:
    """One ring all-reduce: 2(n-1) messages of S/n, each after a latency alpha:
    2(n-1) alpha + 2(n-1)/n x S/B (claim 1). ``rounds``: separate all-reduces (packs), each
    paying its own latencies (claim 7: packing removes (packs - 1) x 2(n-1) x alpha)."""
    return 2 * (n - 1) * alpha * rounds + ring_bytes(S, n) / B if n > 1 else 0.0


def packs(sizes: list[float], bytes_per_pack: int) -> int:
    """The all-reduces TF's packing makes of tensors of ``sizes`` bytes as sent, in the model's
    order: from the last, a pack takes tensors until it holds more than ``bytes_per_pack``
    (``cross_device_utils.group_by_size``); 0 makes one pack. Each pays its own latencies."""
    count, held = 1, 0.0
    for size in reversed(sizes if bytes_per_pack else []):
        count, held = (count + 1, 0.0) if held > bytes_per_pack else (count, held)
        held += size
    return count


def overlapped(compute: float, comm: float, overlap: float = 0.0) -> float:
    """A step's time when ``overlap`` (0..1) of the communication hides behind compute:
    their sum without overlap, max(compute, comm) with all of it (claim 7)."""
    return max(compute, compute + comm - overlap * min(compute, comm))


def scaling_efficiency(n: int, compute: float, comm: float, overlap: float = 0.0) -> float:
    """eta = T(1) / T(n) for a fixed per-worker batch: compute / (compute + the
    communication not hidden) (claim 6's form: 1 / (1 + (T_comm - T_overlap) / T_compute))."""
    if n <= 1:
        return 1.0
    return compute / overlapped(compute, comm, overlap)


def compute_bound_batch(flops_per_example: float, flops_per_s: float, S: float, B: float, n: int) -> float:
    """The per-worker batch above which a ring step's compute exceeds its communication:
    b x flops_per_example / flops_per_s >= 2(n-1)/n x S / B (claim 5: data parallelism
    stays compute-bound while the batch per worker is large enough)."""
    return ring_bytes(S, n) / B * flops_per_s / flops_per_example


# -- a scenario (``scenario.py``: Scenario, Link) ---------------------------------------------

# Sparse gradients cross in 3 all-gathers of n-1 messages each: their rows' count, rows, indices
# (cross_device_utils.all_reduce_indexed_slices); the last two carry (n-1) x a replica's bytes.
SPARSE_GATHERS = 3
# 8-bit messages cross in 4 all-gathers of n-1 messages each: the int8 values, their scales, each
# after TF's gather of every rank's shape (CollectiveReplicaLauncher.all_gather). On the bed, 0.3
# MB: 3 workers at 200 Mbit, 4 at 50 stepped 14 and 18 ms past one gather: its 3 (n-1) latencies.
GATHERS_8BIT = 4

# These constants are payload, as the model's other bytes (``wire_bytes`` adds the frames' headers).
# Each message of TF's ring costs each host's link 375 bytes each way beside its values: the request
# for it (RecvBuf), the response's gRPC and HTTP/2 headers, a last segment's frame. The bed, 100 Mbit,
# a 16-tensor MLP (35 KB) in 1, 4 and 16 packs, 2 and 3 workers (2-64 messages a host a step): 355-612
# bytes of frames a message more; without them the 16 packs read 1.29-1.57 of the model, with them 0.96-1.04.
RING_MESSAGE_BYTES = 375
# A PS task costs a worker step bytes beyond its values, each way (requests, responses' headers): PS_TASK_BYTES,
# PS_VARIABLE_BYTES a variable it holds, and a call of steps_per_call steps PS_CALL_BYTES + PS_CALL_VARIABLE_BYTES
# a variable. Fitted on 26 PS runs on the bed (3-34 variables a task, 0.1 KB-1 MB, 1-3 workers, 1-2 tasks, calls
# of 2-20 steps): 127 of 154 link figures within 0.95-1.1, median 1.00 (1,100 a variable, before: 53, 0.79).
PS_TASK_BYTES, PS_VARIABLE_BYTES, PS_CALL_BYTES, PS_CALL_VARIABLE_BYTES = 1000, 350, 1000, 600
# A cut costs its two hosts' links 4.0-4.9 KB a step each way beside its tensors' bytes (TF's
# requests for them, the responses' headers; the bed: 64 x 16 and 64 x 256 cuts at 50-200 Mbit
# read 8.9-9.4 and 74.7-75.5 KB of frames, while the chief's link carried 1.5-3 KB): bytes only,
# as their time was not seen in the steps.
CUT_STEP_BYTES = 4300


# Compressed messages' casts and quantizing on a worker's CPU, one worker alone on a core (the grid's
# rings on the bed, MLPs of 4 tensors, 0.3-4 MB, 2-4 workers: the anatomy's compute less fp32's, per
# core): 16 bits 0.10 ns a float32 byte (0-1.1 ms at 4 MB), 8 bits 0.25 ms a tensor + 1.6 ns a byte
# (0.3 MB: 1.0-1.8 ms, 1 MB: 1.9-3.5, 4 MB: 5.5-10.0). Only the 4-tensor MLPs measured it.
CODEC = {16: (0.0, 0.10e-9), 8: (0.25e-3, 1.6e-9)}  # bits: (seconds a tensor, seconds a float32 byte)


def codec_time(model_bytes: float, bits: int, tensors: int = 1, value_bytes: float = 4) -> float:
    """Seconds of one worker's step that its ``bits``-per-value messages' casts (16) or
    quantizing and dequantizing (8) take on its CPU, for ``tensors`` tensors of
    ``model_bytes`` bytes of ``value_bytes`` a value (``CODEC``, per float32 byte's value);
    0 at 32 bits."""
    per_tensor, per_byte = CODEC.get(bits, (0.0, 0.0))
    return per_tensor * tensors + per_byte * model_bytes * 4 / value_bytes


def ring(strategy: str) -> bool:
    """Do the strategy's workers sum over a ring (several engines, in lockstep)?"""
    spec = strategies.spec(strategy)
    return spec.synchronous and spec.multi_engine and not spec.has_ps


def compute_time(s: Scenario) -> tuple[float, float]:
    """(a worker's compute per step with ``s.workers`` computing, how much of it is waiting
    for a core). On ``cores`` shared cores each worker keeps one core busy while it computes:
    n workers take max(1, n / cores) times as long as one alone. The measured ``compute``
    is converted from ``compute_workers`` to ``workers`` that way."""
    if s.cores is None or s.cuts:  # a split model's stages compute one after the other
        return s.compute, 0.0
    alone = s.compute / max(1.0, s.compute_workers / s.cores)
    shared = alone * max(1.0, s.workers / s.cores)
    return shared, shared - alone


LO = ":lo"  # a host's loopback, as a path key: "h1:lo"


def _cross(s: Scenario, a: str, b: str) -> list[str]:
    """The paths a message from task ``a`` to task ``b`` takes: both hosts' links, or the
    loopback of the host they share (none when the scenario takes it as free)."""
    ha, hb = s.hosts.get(a), s.hosts.get(b)
    if ha is None or hb is None:
        return []
    if ha == hb:
        return [ha + LO] if s.loopback is not None else []
    return [h for h in (ha, hb) if h in s.links]


def path_link(s: Scenario, path: str) -> Link:
    """The ``Link`` of ``path``: a host's link, or a host's loopback (``LO``)."""
    return s.loopback if path.endswith(LO) else s.links[path]


def cpu_share(s: Scenario, path: str) -> float:
    """How a path's CPU per byte stretches: as compute does when the run's workers share the
    cores (max(1, workers / cores), ``compute_time``); a host's loopback carries all its
    workers' bytes at once, their CPU spread over min(workers, cores) cores."""
    if path.endswith(LO):
        return 1.0 / max(1, min(s.workers, s.cores or s.workers))
    return max(1.0, s.workers / s.cores) if s.cores else 1.0


def seconds(s: Scenario, path: str, sent: float) -> float:
    """The seconds ``sent`` bytes take on ``path``: ``Link.payload_rate`` at its ``cpu_share``."""
    return sent / path_link(s, path).payload_rate(cpu_share(s, path))


def paths(s: Scenario) -> set[str]:
    """Every path some pair of the scenario's tasks talks over."""
    tasks = list(s.hosts)
    return {h for a in tasks for b in tasks if a != b for h in _cross(s, a, b)}


def _ring_step(s: Scenario, chunk: float) -> tuple[float, dict[str, float]]:
    """(time, {host: bytes out}) of one step of a ring over the workers in task order, each
    sending ``chunk`` bytes to the next: a host with m workers whose successor is elsewhere
    sends m chunks at once on its link, and receives as many."""
    workers = [f"worker:{i}" for i in range(s.workers)]
    out: dict[str, float] = {}
    slowest, alpha = 0.0, 0.0
    for i, w in enumerate(workers):
        nxt = workers[(i + 1) % len(workers)]
        crossed = _cross(s, w, nxt)
        # a ring receives as much as it sends: the sender's link (or the loopback) carries it
        key = next((h for h in crossed if h.endswith(LO) or h == s.hosts[w]), None)
        if key is not None:
            out[key] = out.get(key, 0.0) + chunk
        for h in crossed:
            alpha = max(alpha, path_link(s, h).alpha)
    for h, sent in out.items():
        slowest = max(slowest, seconds(s, h, sent))
    return alpha + slowest, out


def _cuts_step(s: Scenario, tx: dict[str, float], rx: dict[str, float]) -> tuple[float, float]:
    """(seconds, of which latency) a split model's step spends sending over its cuts, one
    transfer after the other: the forward pass waits for each cut's activations (the labels
    travel to the last stage beside the first cut's), the backward pass for each cut's
    gradients; each transfer takes its latency plus its bytes over the slower of the two
    links it crosses (full duplex: the forward and backward bytes each cross a link one
    way). Adds each host's bytes per step to ``tx`` and ``rx``."""
    spent, latency = 0.0, 0.0
    last = f"worker:{len(s.cuts)}"
    for i, activations in enumerate(s.cuts):
        a, b = f"worker:{i}", f"worker:{i + 1}"
        labels = s.label_bytes if i == 0 else 0.0
        moves = [(a, b, activations, True), (b, a, activations, True)]
        if labels:  # the labels leave with the batch while stage 0 computes: their bytes take
            moves.append(("worker:0", last, labels, False))  # the link's time, but no latency of their own
        for src, dst, size, waits in moves:
            crossed = _cross(s, src, dst)
            if not crossed:
                continue
            alpha = max(path_link(s, h).alpha for h in crossed) if waits else 0.0
            spent += alpha + max(seconds(s, h, size) for h in crossed)
            latency += alpha
            sender, receiver = s.hosts[src], s.hosts[dst]
            if sender != receiver:
                tx[sender] = tx.get(sender, 0.0) + size
                rx[receiver] = rx.get(receiver, 0.0) + size
    for i in range(len(s.cuts)):  # each cut's requests and headers: bytes only
        for h in (h for h in _cross(s, f"worker:{i}", f"worker:{i + 1}") if not h.endswith(LO)):
            tx[h], rx[h] = tx.get(h, 0.0) + CUT_STEP_BYTES, rx.get(h, 0.0) + CUT_STEP_BYTES
    return spent, latency


def predict(s: Scenario) -> dict[str, Any]:
    """What ``s`` should do: {"steps_per_s", "step_time", "compute_time", "comm_time",
    "wait_time", "input_time", "other_time", "cpu_wait", "bytes_per_step" (each host's
    link: {"tx", "rx"} payload bytes per global step), "wire_bytes_per_step" (the same as
    its counters read them: ``wire_bytes``), "link_util" ({host: share of its rate used
    while training}), "ps_load" ({PS task: payload bytes/s its workers pull}), "worker_shares"
    (a parameter server's: {worker: its share of the global steps}),
    "link_time", "latency_time" (a step's seconds on links, of them latency), "bottleneck",
    "why"}.

    Synchronous rings: step time = input + compute + the ring's messages + other; the ring's
    time is its 2(n-1) (all-gather: n-1) message steps, each the latency plus the busiest
    link's share, a message a pack with its headers (``RING_MESSAGE_BYTES``; 8 bits: 3 (n-1)
    more latencies, ``GATHERS_8BIT``; sparse gradients: ``SPARSE_GATHERS`` more gathers).
    Parameter servers: each worker step pulls every variable and pushes every gradient (S
    each way on its link, a share of both on each PS task's, + ``PS_TASK_BYTES`` a task,
    ``PS_VARIABLE_BYTES`` a variable, and a call's; an embedding's table pulled whole, its rows pushed:
    ``ps_sparse``), the pull, then the push, one after the other (not at once, as
    claim 3 takes them); the global rate is the lesser of the workers' paces summed (each
    steps at its own: asynchronous) and each link's bytes/s over the bytes it must move
    per global step. Every
    transfer's bytes also pay their ends' CPU (``seconds``). A split model (``cuts``): step
    time = input + every stage's compute + each cut's transfers forward and back, one after
    the other (``_cuts_step``); no overlap (the workbench runs no pipeline of micro-batches)."""
    compute, cpu_wait = compute_time(s)
    n = s.workers
    fixed = s.input + compute + s.other
    tx: dict[str, float] = {}
    rx: dict[str, float] = {}
    comm, ps_load, shares = 0.0, {}, {}
    spec = strategies.spec(s.strategy)
    if ring(s.strategy) and n > 1:
        S = message_bytes(s.model_bytes, s.bits, s.tensors, s.value_bytes)
        steps, chunk = (n - 1, S) if s.bits == 8 else (2 * (n - 1), S / n)
        packs = 1 if s.bits == 8 else s.packs  # each pack its messages, their values' bytes split
        # a message step: a message a pack, each with its own headers (8 bits: the other gathers' too)
        headers = (GATHERS_8BIT if s.bits == 8 else packs) * RING_MESSAGE_BYTES
        one, out = _ring_step(s, chunk + headers)
        alpha = max((path_link(s, h).alpha for h in out), default=0.0)
        dense = bool(S) or not s.sparse  # a model of sparse gradients only all-reduces nothing dense
        comm = steps * (one + (packs - 1) * alpha) if dense else 0.0
        latency = steps * (GATHERS_8BIT if s.bits == 8 else packs) * alpha if dense else 0.0
        if s.bits == 8 and dense:  # latency-only gathers beside the one that carries the bytes
            comm += (GATHERS_8BIT - 1) * (n - 1) * alpha
        sent = {h: steps * b for h, b in out.items()} if dense else {}
        if s.sparse:  # gathered: each rank's rows pass every other rank, n-1 message steps a gather
            one, out = _ring_step(s, s.sparse + SPARSE_GATHERS * RING_MESSAGE_BYTES)
            comm += (n - 1) * (one + (SPARSE_GATHERS - 1) * alpha)
            latency += (n - 1) * SPARSE_GATHERS * alpha
            sent = {h: sent.get(h, 0.0) + (n - 1) * out.get(h, 0.0) for h in set(sent) | set(out)}
        every = s.average_every if spec.averages else 1
        comm, latency = comm / every, latency / every
        for h, b in sent.items():
            tx[h] = tx.get(h, 0.0) + b / every
            rx[h] = rx.get(h, 0.0) + b / every  # a ring receives what it sends
        worker_time = fixed + comm
        rate = 1.0 / (worker_time + s.pauses)
        on_links = comm
    elif spec.has_ps:
        S = s.model_bytes
        shares = s.ps_shares or {f"ps:{j}": 1.0 / max(s.ps, 1) for j in range(s.ps)}
        # each PS task's bytes per worker step: its share of the values each way, and its own and its
        # variables' requests and headers, a step's and a call's (``PS_TASK_BYTES``, ...)
        # (an embedding's table is pulled whole and pushed as its rows: ``ps_sparse``)
        served: dict[str, tuple[float, float]] = {}  # PS task -> (bytes out, bytes in)
        for ps in sorted(set(shares) | set(s.ps_variables) | set(s.ps_sparse)):
            values, held = shares.get(ps, 0.0) * S, s.ps_variables.get(ps, 0)
            table, rows = s.ps_sparse.get(ps, (0.0, 0.0))
            calls = (PS_TASK_BYTES + PS_VARIABLE_BYTES * held + (PS_CALL_BYTES + PS_CALL_VARIABLE_BYTES * held)
                     / s.steps_per_call) if held else 0.0
            served[ps] = (values + table + calls, values + rows + calls)
        # a worker's step pulls its variables, then (after its compute) pushes its gradients, one
        # after the other (one worker, 0.15 MB each way on 5 Mbit links: 1.82-1.92 steps/s, the
        # two transfers' 1.93; bench/README.md, "the old bucket"); between workers they overlap.
        # A global step is one worker's: w makes pace_w / sum(pace) of them (09: a worker at
        # 20 Mbit beside one at 1 Gbit). mine: worker -> (pull, push, {link: [out, in] from the PS})
        alpha, mine = 0.0, {}
        for w in (f"worker:{i}" for i in range(n)):
            moved: dict[str, list[float]] = {}
            for ps, (out, back) in served.items():
                for h in _cross(s, ps, w):
                    moved.setdefault(h, [0.0, 0.0])
                    moved[h][0] += out
                    moved[h][1] += back
                    alpha = max(alpha, path_link(s, h).alpha)
            # the pull moves out, the push back (an embedding's table whole, its rows back)
            mine[w] = (max([0.0] + [seconds(s, h, b[0]) for h, b in moved.items()]),
                       max([0.0] + [seconds(s, h, b[1]) for h, b in moved.items()]), moved)
        own = {w: fixed + pull + push + 2 * alpha for w, (pull, push, _) in mine.items()}
        paces = {w: 1 / t if t > 0 else float("inf") for w, t in own.items()}
        total = sum(paces.values())
        shares = {w: p / total if math.isfinite(total) else 1 / n for w, p in paces.items()}
        pull, push = (sum(shares[w] * m[i] for w, m in mine.items()) for i in (0, 1))
        for w, (_, _, moved) in mine.items():
            for h, (out, back) in moved.items():
                ps_side = h not in (s.hosts[w], s.hosts[w] + LO)
                tx[h] = tx.get(h, 0.0) + (out if ps_side else back) * shares[w]
                rx[h] = rx.get(h, 0.0) + (back if ps_side else out) * shares[w]
        worker_time = fixed + pull + push + 2 * alpha  # the mean over steps: n / sum(pace)
        rate = n / (worker_time + n * s.pauses) if worker_time > 0 else float("inf")
        for h in set(tx) | set(rx):  # each link moves its bytes per global step at most at its rate
            rate = min(rate, path_link(s, h).payload_rate(cpu_share(s, h)) / max(tx.get(h, 0.0), rx.get(h, 0.0)))
        # a link that bounds the rate slows every transfer over it: each worker's step then
        # takes n / rate, its pull and push the rest, the wait split between them (the
        # anatomy's compute, which holds the pull, then grows with compute at half its rate:
        # ``without_pulls`` finds the compute again)
        slack = n / rate - n * s.pauses - fixed - 2 * alpha if rate > 0 else 0.0
        if slack > pull + push:
            pull, push = pull + (slack - pull - push) / 2, push + (slack - pull - push) / 2
        worker_time = fixed + pull + push + 2 * alpha
        on_links = pull + push + 2 * alpha
        latency = 2 * alpha
        # the anatomy times the pull inside compute (the forward pass reads the variables)
        # and the push after it
        compute += pull + alpha
        comm = push + alpha
        for ps, (size, _) in served.items():
            crosses = any(_cross(s, ps, f"worker:{i}") for i in range(n))
            ps_load[ps] = rate * size if crosses else 0.0
    elif s.cuts:
        comm, latency = _cuts_step(s, tx, rx)
        worker_time, on_links = fixed + comm, comm
        rate = 1.0 / (worker_time + s.pauses) if worker_time + s.pauses > 0 else float("inf")
    else:  # one engine: nothing crosses a link
        worker_time, on_links, latency = fixed, 0.0, 0.0
        rate = 1.0 / (fixed + s.pauses) if fixed + s.pauses > 0 else float("inf")
    # the share of what each shaped link can carry (its payload bytes/s) that the run uses:
    # 1 when it is the bottleneck, as its byte counters (headers included) read against its rate
    util = {h: max(tx.get(h, 0.0), rx.get(h, 0.0)) * rate / s.links[h].bytes_per_s
            for h in set(tx) | set(rx) if not h.endswith(LO) and s.links[h].rate}
    out = {"steps_per_s": rate, "step_time": worker_time, "compute_time": compute, "comm_time": comm,
           "wait_time": 0.0, "input_time": s.input, "other_time": s.other, "cpu_wait": cpu_wait,
           "bytes_per_step": {h: {"tx": tx.get(h, 0.0), "rx": rx.get(h, 0.0)} for h in sorted(set(tx) | set(rx))
                              if not h.endswith(LO)},
           "wire_bytes_per_step": {h: {"tx": wire_bytes(tx.get(h, 0.0), rx.get(h, 0.0)),
                                       "rx": wire_bytes(rx.get(h, 0.0), tx.get(h, 0.0))}
                                   for h in sorted(set(tx) | set(rx)) if not h.endswith(LO)},
           "link_util": util, "ps_load": ps_load, "worker_shares": shares, "link_time": on_links,
           "latency_time": latency}
    from workbench.common import bottleneck  # it reads the model's parts: imported once both exist

    out["bottleneck"], out["why"] = bottleneck.named(s, out, fixed)
    return out


def without_pulls(s: Scenario, measured: float) -> float:
    """A parameter-server worker's compute per step without its pulls of the variables, from
    the ``measured`` compute of its anatomy, which times them inside the forward pass: the
    compute C at which ``predict`` counts ``measured`` (C plus the pull, as the links
    loaded by C let it go; C + pull grows with C). 0 when the pull alone takes longer."""
    def counted(compute: float) -> float:
        return predict(replace(s, compute=compute))["compute_time"]

    low, high = 0.0, max(measured, 0.0)
    if counted(low) >= measured:
        return 0.0
    for _ in range(40):  # bisection: 2^-40 of the measured time
        mid = (low + high) / 2
        low, high = (mid, high) if counted(mid) < measured else (low, mid)
    return (low + high) / 2
