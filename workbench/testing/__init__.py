"""Testing notebooks that use the workbench: ``wb.within`` (a number that varies, checked
against a band), the pytest plugin that nbval runs them with (``plugin.py``: an entry
point, loaded by every pytest of an environment where the workbench is installed), its
sanitizers (``sanitize.py``). docs/testing.md says what is compared and why.

This module imports neither pytest nor the kernel side: notebooks import it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass


@dataclass(frozen=True)
class Within:
    """A measured number inside its band: shows as ``test accuracy within [0.85, 0.97]
    (measured 0.916)``; nbval compares it without the measured value."""

    what: str
    value: float
    low: float
    high: float

    def __repr__(self) -> str:
        return f"{self.what} within [{self.low:g}, {self.high:g}] (measured {self.value:.4g})"


def within(value: float, low: float, high: float, what: str = "value") -> Within:
    """Check a number that varies between executions (an asynchronous run's accuracy, a
    speed) against the band ``[low, high]`` that teaches, for a notebook compared by nbval:
    inside, it shows the band and the number, and the comparison reads the band; outside
    (or NaN), it raises an ``AssertionError`` with the number, which fails the cell.

    ``wb.within(pss.evaluation["test_accuracy"], 0.85, 0.97, "test accuracy")``"""
    from workbench.errors import invalid

    for name, number in (("value", value), ("low", low), ("high", high)):
        if isinstance(number, bool) or not isinstance(number, numbers.Real):
            raise invalid(name, number, "a number")
    if not low <= high:
        raise invalid("high", high, f"a number >= low ({low})")
    if math.isnan(value) or not low <= value <= high:
        raise AssertionError(f"{what} {value:.4g} is outside [{low:g}, {high:g}]")
    return Within(what, float(value), float(low), float(high))
