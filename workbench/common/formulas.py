"""The teaching references' formulas that ``costmodel.predict`` does not compose: a naive
ring's bytes and time (claim 2), one synchronous PS round and a ring's gain over it (claims
3, 4), a parameter's memory in training (claim 9), asynchronous staleness and the learning
rate it allows (claim 11), the checkpoint interval (claim 12). ``costmodel`` re-exports them."""

from __future__ import annotations

import math

from workbench.common import validate

OPTIMIZER_BYTES = {"sgd": 8, "momentum": 12, "adam": 16}  # fp32 weights + gradients, + 1 or 2 moments


def memory_per_parameter(optimizer: str) -> int:
    """Bytes a parameter costs in training at fp32: weights and gradients (8), plus momentum
    (12) or Adam's two moments (16) (claim 9: the Ultra-Scale Playbook). Split 1/k over k PS
    tasks by a variable partitioner."""
    return OPTIMIZER_BYTES[optimizer]


def async_staleness(n: int) -> float:
    """With n equal-speed asynchronous workers a gradient is on average n-1 updates stale
    (claim 11: ML Systems book)."""
    return max(n - 1, 0)


def stale_rate(delay: int) -> float:
    """The largest learning rate at which gradient descent still converges when each gradient
    is applied ``delay`` updates late, over the undelayed one's: sin(pi / (4k + 2)) (claim
    11's cost: x(t+1) = x(t) - a x(t-k) is stable for a < 2 sin(pi / (4k + 2)), Levin and May
    1976); about pi / (4k) at large k, near staleness-aware SGD's 1 / (k + 1) (Zhang et al. 2016)."""
    delay = validate.positive_int("delay", delay, minimum=0)
    return math.sin(math.pi / (4 * delay + 2))


def young_daly(write_s: float, mtbf_s: float) -> float:
    """The checkpoint interval that loses least to failures: sqrt(2 x write time x MTBF)
    (claim 12: Young 1974, Daly 2006)."""
    return math.sqrt(2 * write_s * mtbf_s)


def naive_ring_bytes(S: float, n: int) -> float:
    """A ring that forwards whole tensors: (n-1) x S per rank, n/2 times the reduce-scatter
    + all-gather ring (claim 2: CS336 assignment 2)."""
    return (n - 1) * S


def naive_ring_time(S: float, n: int, B: float) -> float:
    """The naive ring (claim 2): (n-1) x S / B."""
    return (n - 1) * S / B


def ps_round_time(M: float, n: int, k: int, B: float) -> float:
    """One synchronous round of n workers on k PS tasks of equal links, M bytes each way per
    worker: a worker's link moves M, each PS link n M / k: max(M/B, n M / (k B)) (claim 3:
    d2l, BytePS)."""
    return max(M / B, n * M / (k * B))


def ring_over_ps(n: int) -> float:
    """How much faster a ring all-reduce is than one PS at equal links: n^2 / (2(n-1))
    (claim 4; x2.7 at n = 4)."""
    return n * n / (2 * (n - 1))
