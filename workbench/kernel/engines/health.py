"""Is an engine's TF server still there? Asked from the kernel over TCP: a process gone
(refused) tells from a host cut off the network (silent)."""

from __future__ import annotations

import socket
from collections.abc import Sequence


def answer(target: str, timeout: float = 2.0) -> str:
    """How ``"address:port"`` answers a TCP connection from here: "open", "refused" (its
    host is reachable, nothing listens there: the process is gone), or "silent" (no answer
    at all: the host is down or cut off the network)."""
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        return "open"
    except ConnectionRefusedError:
        return "refused"
    except OSError:  # a timeout, or no route / host unreachable
        return "silent"


def unreachable(targets: Sequence[str], timeout: float = 2.0) -> list[str]:
    """The ``"address:port"`` targets that refuse or ignore a TCP connection from here."""
    from concurrent.futures import ThreadPoolExecutor

    def down(target):
        host, port = target.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
            return False
        except OSError:
            return True

    if not targets:
        return []
    with ThreadPoolExecutor(min(len(targets), 16)) as pool:
        return [t for t, d in zip(targets, pool.map(down, targets)) if d]

