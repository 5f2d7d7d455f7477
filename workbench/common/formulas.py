"""The teaching references' formulas beyond a step's communication: a parameter's memory
in training (claim 9), asynchronous staleness and the learning rate it allows (claim 11),
the checkpoint interval (claim 12). ``costmodel`` (time and bytes) re-exports them."""

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
