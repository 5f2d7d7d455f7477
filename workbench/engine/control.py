"""A stop request from the kernel to a running task, through ipyparallel: no shared
filesystem needed.

The kernel aborts the task's own message (``client.abort(jobs=...)``, public API).
ipyparallel's engine handles that on its control thread while the task runs, by adding the
message id to its kernel's ``aborted`` set (which it otherwise uses only to skip queued
tasks). A task that knows its message id reads it there as "stop". The run directory's
STOP file stays the other way in: the CLI and the panel have no ipyparallel client; the
kernel watching the run forwards it here for hosts that do not see it (kernel/unshared.py)."""

from __future__ import annotations

from typing import Any

_msg_id: str | None = None  # the message of the task running on this engine


def _kernel() -> Any:
    try:
        from ipykernel.kernelbase import Kernel
    except ImportError:
        return None
    return Kernel.instance() if Kernel.initialized() else None


def begin() -> None:
    """At a task's start, on the engine's main thread: remember its message id."""
    global _msg_id
    kernel = _kernel()
    if kernel is None:
        _msg_id = None
        return
    parent = kernel.get_parent("shell") or {}
    _msg_id = parent.get("header", {}).get("msg_id")
    if not _msg_id:  # where publish_data finds the task's message (ipyparallel's data publisher)
        pub = getattr(getattr(kernel, "shell", None), "data_pub", None)
        _msg_id = (getattr(pub, "parent_header", None) or {}).get("msg_id")


def end() -> None:
    """At a task's end: forget its message (and a stop sent to it)."""
    global _msg_id
    kernel = _kernel()
    if kernel is not None and _msg_id is not None:
        getattr(kernel, "aborted", set()).discard(_msg_id)
    _msg_id = None


def stop_sent() -> bool:
    """Has the kernel asked the running task to stop?"""
    kernel = _kernel()
    return _msg_id is not None and kernel is not None and _msg_id in getattr(kernel, "aborted", ())
