"""Argument checks run in the kernel before any engine is touched.

Each check raises ``ConfigError`` naming the argument, what was received and what was
expected; unknown names suggest the closest valid one.
"""

import difflib
import numbers

from workbench.errors import invalid

LOSSES = (
    "sparse_categorical_crossentropy",
    "categorical_crossentropy",
    "binary_crossentropy",
    "mean_squared_error",
)
OPTIMIZERS = ("sgd", "adam", "rmsprop", "adagrad")


def positive_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise invalid(name, value, f"an int >= {minimum}")
    return int(value)


def optional_int(name, value, minimum=0):
    return None if value is None else positive_int(name, value, minimum)


def positive_float(name, value):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value > 0
        or value != value
        or value == float("inf")
    ):
        raise invalid(name, value, "a finite number > 0")
    return float(value)


def fraction(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise invalid(name, value, "a number in [0, 1)")
    return float(value)


def choice(name, value, options):
    if isinstance(value, str) and value in options:
        return value
    close = difflib.get_close_matches(str(value), options, n=1)
    hint = f"Did you mean {close[0]!r}?" if close else ""
    raise invalid(name, value, "one of " + ", ".join(repr(o) for o in options), hint)


def name_or_callable(name, value, options):
    if callable(value):
        return value
    return choice(name, value, options)


def topology(strategy, workers, ps, adapter, available=None):
    """Check worker/PS counts against the strategy and the engines at hand.

    Returns the number of engines the run needs.
    """
    workers = positive_int("workers", workers)
    ps = positive_int("ps", ps, minimum=0)
    if "ps" in adapter.ROLES and ps < 1:
        raise invalid("ps", ps, f"an int >= 1 with strategy={strategy!r}, which keeps variables on PS tasks")
    if "ps" not in adapter.ROLES and ps != 0:
        raise invalid("ps", ps, f"0 with strategy={strategy!r}, which has no parameter servers")
    if "local" in adapter.ROLES and workers != 1:
        raise invalid(
            "workers", workers,
            f"1 with strategy={strategy!r}, which runs on one engine "
            "(use 'multi_worker_mirrored' or 'parameter_server' for several)",
        )
    counts = {"chief": 1, "local": 1, "ps": ps, "worker": workers}
    needed = sum(counts[r] for r in adapter.ROLES)
    if available is not None and needed > available:
        roles = " + ".join(f"{counts[r]} {r}" for r in adapter.ROLES)
        raise invalid(
            "workers", workers,
            f"a topology that fits the cluster's {available} engines: "
            f"strategy={strategy!r} with ps={ps} needs {needed} ({roles})",
        )
    return needed
