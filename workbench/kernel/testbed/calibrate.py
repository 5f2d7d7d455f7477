"""Per-message latency (alpha) and bandwidth (beta) of the test bed's paths, measured.

The cost model predicts a transfer of S bytes as ``alpha + S / beta``; this module measures
both on the links at hand, the way training sends: one TCP connection opened once and
reused (as gRPC does), ``TCP_NODELAY``, a message of S bytes, then a short idle gap.

    t = calibrate.measure(bed, "h1", "h2")          # {S: median seconds h1 -> h2}
    calibrate.link_parameters(bed, "h1")            # {"alpha_s", "bytes_per_s", "efficiency", ...}
    calibrate.link_parameters(bed, "h1", peer="h1") # h1's loopback

A transfer's time is one-way: from the sender's first ``send`` to the receiver's read of
the last byte, both read from ``CLOCK_MONOTONIC`` (network namespaces share it). alpha is
the median one-way time of a 1-byte message: the path's latency plus both ends' Python and
system-call costs; no link emulates more (this kernel has no netem).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from workbench.errors import TestbedError, invalid

SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)
GAP = 0.1  # seconds idle before each message: training's messages come between computations

# receiver: accept one connection; per message an 8-byte size, then that many bytes; answer
# with the monotonic time the last byte was read (0: the end)
_RECEIVE = """
import socket, struct, sys, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], 0)); srv.listen(1); print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept(); conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
view = memoryview(bytearray(1 << 20))
def read(n):
    while n:
        got = conn.recv_into(view[:min(n, len(view))])
        if not got:
            sys.exit(0)
        n -= got
    return view
while True:
    size = struct.unpack("!Q", read(8)[:8])[0]
    if not size:
        break
    read(size)
    conn.sendall(struct.pack("!d", time.monotonic()))
"""
# sender: one warm-up round (the connection's slow start), then ``repeats`` rounds of every
# size, each after ``gap`` seconds idle; prints {size: [one-way seconds, ...]}
_SEND = """
import json, socket, struct, sys, time
host, port, sizes, repeats, gap = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
s = socket.create_connection((host, port), 10); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = bytearray(8 + max(sizes)); out = {n: [] for n in sizes}
def answer():
    got = b""
    while len(got) < 8:
        chunk = s.recv(8 - len(got))
        if not chunk:
            raise SystemExit("the receiver closed the connection")
        got += chunk
    return struct.unpack("!d", got)[0]
for r in range(repeats + 1):
    for n in sizes:
        time.sleep(gap)
        struct.pack_into("!Q", buf, 0, n)
        t0 = time.monotonic(); s.sendall(memoryview(buf)[:8 + n]); t1 = answer()
        if r:
            out[n].append(t1 - t0)
s.sendall(struct.pack("!Q", 0))
print(json.dumps(out))
"""


def transfers(bed: Any, a: str, b: str, sizes: Sequence[int] = SIZES, repeats: int = 5,
              gap: float = GAP) -> dict[int, list[float]]:
    """{S: [seconds, ...]}: ``repeats`` one-way transfers of S bytes from host ``a`` to host
    ``b`` of ``bed`` (``a == b``: over that host's loopback) on one TCP connection, after one
    unrecorded round that opens the connection's window."""
    _check(bed, a, b, sizes, repeats)
    address = "127.0.0.1" if a == b else bed.hosts[b]
    receiver = subprocess.Popen(["ip", "netns", "exec", bed.netns(b), sys.executable, "-c", _RECEIVE, address],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = receiver.stdout.readline().strip()
        if not port.isdigit():
            raise TestbedError(f"the receiver on {b} did not start: {receiver.communicate(timeout=10)[1].strip()}")
        sender = subprocess.run(["ip", "netns", "exec", bed.netns(a), sys.executable, "-c", _SEND, address, port,
                                 json.dumps(list(sizes)), str(repeats), str(gap)],
                                capture_output=True, text=True, timeout=600)
        if sender.returncode != 0:
            raise TestbedError(f"the sender on {a} failed ({sender.returncode}): {sender.stderr.strip()[-2000:]}")
        receiver.wait(10)
        return {int(n): times for n, times in json.loads(sender.stdout).items()}
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()


def measure(bed: Any, a: str, b: str, sizes: Sequence[int] = SIZES, repeats: int = 5,
            gap: float = GAP) -> dict[int, float]:
    """{S: median seconds} of one-way transfers of S bytes from host ``a`` to host ``b``
    over an open connection (``transfers``)."""
    return {n: statistics.median(t) for n, t in transfers(bed, a, b, sizes, repeats, gap).items()}


def link_parameters(bed: Any, host: str, peer: str | None = None, repeats: int = 5) -> dict[str, Any]:
    """alpha and beta of the path from ``host`` to ``peer`` (default: another host of the
    bed, unshaped ones first; ``peer == host``: the host's loopback).

    Returns {"alpha_s": median one-way seconds of a 1-byte message, "bytes_per_s": payload
    bytes/s (the slope between two sizes large enough that alpha is a few per cent of
    their times), "rate_bits": the path's set rate, the slower end's (None: unshaped or
    loopback), "efficiency": bytes_per_s x 8 over that rate (TCP/IP and Ethernet headers
    take ~4.4% at a 1500-byte MTU), "path": (host, peer)}."""
    if peer is None:
        others = [h for h in bed.hosts if h != host]
        if not others:
            raise invalid("peer", peer, "another host of the bed (this bed has only one)")
        peer = min(others, key=lambda h: bed.links.get(h) is not None)
    # the path's rate: the slower of its two ends (a shaped peer shapes it too)
    rates = [] if peer == host else [r for r in (bed.links.get(host), bed.links.get(peer)) if r is not None]
    bits = min(rates) if rates else None
    # sizes of ~20 and ~100 ms at the set rate (unshaped / loopback: 3 and 30 MB)
    small, large = (3_000_000, 30_000_000) if bits is None else (max(bits // 400, 10_000), max(bits // 80, 50_000))
    times = measure(bed, host, peer, (1, small, large), repeats)
    beta = (large - small) / (times[large] - times[small])
    return {"alpha_s": times[1], "bytes_per_s": beta, "rate_bits": bits,
            "efficiency": None if bits is None else beta * 8 / bits, "path": (host, peer)}


def _check(bed, a, b, sizes, repeats):
    for name, host in (("a", a), ("b", b)):
        if host not in bed.hosts:
            raise invalid(name, host, f"a host of this bed ({', '.join(bed.hosts)})")
    if not sizes or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in sizes):
        raise invalid("sizes", sizes, "a non-empty sequence of positive byte counts")
    if not isinstance(repeats, int) or repeats < 1:
        raise invalid("repeats", repeats, "a positive int")


# -- TF's collectives on a cluster's path: what the cost model takes (store/calibration.py) ----

PACKED_MODEL = (32,) * 7  # an MLP of 16 tensors: one pack, or one all-reduce per tensor
LARGE_BYTES = 4e6  # the ring whose bytes give the CPU per byte


def calibrate_links(cluster: Any, workers: int = 2, steps: int = 60, save: bool = True) -> dict[str, Any]:
    """``wb.calibrate_links(cluster)``: the path ``cluster``'s engines talk over, measured
    with TF's own ring all-reduce (``multi_worker_mirrored``, ``workers`` engines, each step's
    timed communication, the median past the first two calls): ``alpha_s`` from a 16-tensor
    model all-reduced in one pack and in 16 (the 15 more packs' 2(n-1) messages each),
    ``cpu_s_per_byte`` from a 4 MB model's ring: its time beyond 2(n-1) alpha over the time
    the cost model gives that ring at one second a byte (its busiest path's bytes, the cores'
    sharing included), so that the model predicts the ring it measured. The path is
    "loopback" on a local cluster, "veth" across a test
    bed's hosts, whose links must be unshaped. ``save``: keep it for this machine
    (``store/calibration.py``), where ``run.explain()`` and ``wb.predict`` read it."""
    import math
    import os

    from workbench import datasets, models
    from workbench.common import anatomy, costmodel, validate
    from workbench.kernel.runs import explain
    from workbench.store import calibration

    workers = validate.positive_int("workers", workers, minimum=2)
    steps = validate.positive_int("steps", steps, minimum=20)
    if not getattr(cluster, "running", False) or len(cluster.engines) < workers:
        raise invalid("cluster", cluster, f"a running cluster of at least {workers} engines")
    data = datasets.digits()
    spe = 5

    def ring(model, **options):
        run = cluster.train(model, data, strategy="multi_worker_mirrored", workers=workers, seed=0, steps=steps,
                            global_batch_size=16 * workers, steps_per_execution=spe, checkpoint_every=0,
                            learning_rate=0.01, dashboard=False, logs=False, **options).wait(timeout=900)
        h = run.history
        steady = h[h.step > anatomy.traced(1, spe)]
        return float(steady.groupby("worker").comm_time.median().mean()), run

    one, packed = ring(models.mlp(PACKED_MODEL))
    each, _ = ring(models.mlp(PACKED_MODEL), bytes_per_pack=1)
    tensors = explain.trainable_bytes(packed.placement)[1]
    messages = 2 * (workers - 1)
    alpha = (each - one) / (messages * (tensors - 1))
    hidden = round((LARGE_BYTES / 4 - 10) / (data.x_train.shape[1] + 1 + 10))
    large, run = ring(models.mlp((hidden,)))
    rates = explain.link_rates(run) or {}
    if any(r is not None for r in rates.values()):
        raise invalid("cluster", cluster, "a cluster whose hosts' links are unshaped (bed.set_link(host, None))",
                      f"Its links: {rates}.")
    S = explain.trainable_bytes(run.placement)[0]
    unit = costmodel.Link(math.inf, 0.0, cpu_per_byte=1.0)  # the model's ring at 1 s a byte
    hosts = {f"worker:{i}": f"h{i}" if rates else "local" for i in range(workers)}
    seconds = costmodel.predict(costmodel.Scenario(
        "multi_worker_mirrored", workers, S, 0.0, hosts, links={h: unit for h in hosts.values()} if rates else {},
        loopback=unit, cores=os.cpu_count()))["comm_time"]
    per_byte = (large - messages * alpha) / seconds
    if alpha <= 0 or per_byte <= 0:  # a measurement the machine's other work drowned: not kept
        raise TestbedError(f"calibrate_links measured alpha {alpha * 1e3:.3f} ms a message and {per_byte * 1e9:.3f} "
                           f"ns a byte (16 packs {each * 1e3:.2f} ms, 1 pack {one * 1e3:.2f} ms, the 4 MB ring "
                           f"{large * 1e3:.2f} ms): both must be positive. Nothing was saved; run it again on a "
                           "quieter machine, or with more steps.")
    figures = {"alpha_s": alpha, "cpu_s_per_byte": per_byte, "workers": workers, "measured": time.time(),
               "runs": [packed.id, run.id], "model_bytes": S, "ring_s": large, "packs_s": [one, each]}
    name = "veth" if rates else "loopback"
    if save:
        calibration.write(name, figures)
    return {"path": name, **figures}
