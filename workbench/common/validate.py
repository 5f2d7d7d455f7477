"""Argument checks run in the kernel before any engine is touched.

Each check raises ``ConfigError`` naming the argument, what was received and what was
expected; unknown names suggest the closest valid one.
"""

import difflib
import numbers
from collections.abc import Callable, Sequence

from workbench.common.strategies import StrategySpec
from workbench.errors import invalid

LOSSES = (
    "sparse_categorical_crossentropy",
    "categorical_crossentropy",
    "binary_crossentropy",
    "mean_squared_error",
)
OPTIMIZERS = ("sgd", "adam", "rmsprop", "adagrad")


def positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise invalid(name, value, f"an int >= {minimum}")
    return int(value)


def optional_int(name: str, value: object, minimum: int = 0) -> int | None:
    return None if value is None else positive_int(name, value, minimum)


def positive_float(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value > 0
        or value != value
        or value == float("inf")
    ):
        raise invalid(name, value, "a finite number > 0")
    return float(value)


def finite_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not abs(value) < float("inf"):
        raise invalid(name, value, "a finite number")
    return float(value)


def fraction(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise invalid(name, value, "a number in [0, 1)")
    return float(value)


def choice(name: str, value: object, options: Sequence[str]) -> str:
    if isinstance(value, str) and value in options:
        return value
    close = difflib.get_close_matches(str(value), options, n=1)
    hint = f"Did you mean {close[0]!r}?" if close else ""
    raise invalid(name, value, "one of " + ", ".join(repr(o) for o in options), hint)


def name_or_callable(name: str, value: object, options: Sequence[str]) -> str | Callable:
    if callable(value):
        return value
    return choice(name, value, options)


def topology(spec: StrategySpec, workers: int, ps: int, available: int | None = None) -> int:
    """Check worker/PS counts against the strategy and the engines at hand.

    Returns the number of engines the run needs.
    """
    strategy = spec.name
    workers = positive_int("workers", workers)
    ps = positive_int("ps", ps, minimum=0)
    if spec.has_ps and ps < 1:
        raise invalid("ps", ps, f"an int >= 1 with strategy={strategy!r}, which keeps variables on PS tasks")
    if not spec.has_ps and ps != 0:
        raise invalid("ps", ps, f"0 with strategy={strategy!r}, which has no parameter servers")
    if spec.local and workers != 1:
        raise invalid(
            "workers", workers,
            f"1 with strategy={strategy!r}, which runs on one engine "
            "(use 'multi_worker_mirrored' or 'parameter_server' for several)",
        )
    counts = spec.role_counts(workers, ps)
    needed = spec.engines(workers, ps)
    if available is not None and needed > available:
        roles = " + ".join(f"{n} {r}" for r, n in counts.items())
        raise invalid(
            "workers", workers,
            f"a topology that fits the cluster's {available} engines: "
            f"strategy={strategy!r} with ps={ps} needs {needed} ({roles})",
        )
    return needed
