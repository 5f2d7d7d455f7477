"""The clusters this kernel has started or attached to and not stopped yet: what
interpreter exit stops, ``wb.load`` looks in for live runs, and ``%wb`` lists."""

import weakref
from typing import Any

_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()


def add(cluster: Any) -> None:
    _LIVE.add(cluster)


def discard(cluster: Any) -> None:
    _LIVE.discard(cluster)


def clusters() -> list:
    """The live clusters, oldest first is not promised: a snapshot list."""
    return list(_LIVE)
