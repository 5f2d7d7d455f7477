"""One newline-ended message read from a socket: how the kernel and an engine's debug thread,
and a forked engine and its zygote, talk (``engine/startup/``, ``kernel/engines/stacks.py``)."""

from __future__ import annotations

import socket


def read_line(conn: socket.socket, size: int = 65536) -> bytes:
    """The bytes ``conn`` receives up to its first newline, included; without one when the
    peer closed the connection first (what came before it)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(size)
        if not chunk:
            break
        data += chunk
    return data
