"""The clusters this kernel has started or attached to and not stopped yet: what
interpreter exit stops (``stop_all``), ``wb.load`` looks in for live runs, and ``%wb`` lists."""

import atexit
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


def stop_all() -> None:
    """At interpreter exit: stop every cluster this process started, quietly. Runs still
    training end as stopped by the cluster (their run directories say so)."""
    live = clusters()
    for cluster in live:
        try:
            cluster.stop()
        except Exception:  # exit goes on: the reaper ends what is left
            pass
    for cluster in live:
        for run in cluster.runs:
            run.join(5)  # the watcher records the run's end before the interpreter tears down


def stop_all_at_exit() -> None:
    """Register ``stop_all`` (again) now that ipyparallel and pyzmq are imported: atexit
    runs handlers last-registered first, so it runs before pyzmq's garbage collector stops
    (after which freeing a zero-copy message prints ``RuntimeError: zmq gc socket requested
    during shutdown``, once per message) and while every socket still works."""
    import zmq.utils.garbage  # noqa: F401  (registers pyzmq's own handler first)

    atexit.unregister(stop_all)
    atexit.register(stop_all)
