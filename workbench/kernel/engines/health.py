"""Is an engine still there, and how did it end? Its TF server asked from the kernel over TCP
(a process gone, refused, tells from a host cut off the network, silent), and the end of its
log read for a crash."""

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


def answers(targets: Sequence[str], timeout: float = 2.0) -> dict[str, str]:
    """``answer`` for each ``"address:port"`` target, asked all at once: {target: answer}."""
    from concurrent.futures import ThreadPoolExecutor

    if not targets:
        return {}
    with ThreadPoolExecutor(min(len(targets), 16)) as pool:
        return dict(zip(targets, pool.map(lambda t: answer(t, timeout), targets)))


def unreachable(targets: Sequence[str], timeout: float = 2.0) -> list[str]:
    """The ``"address:port"`` targets that refuse or ignore a TCP connection from here."""
    return [t for t, a in answers(targets, timeout).items() if a != "open"]


def crashed_in_profiler(output: str) -> bool:
    """Does an engine's last output (``Cluster.engine_output``) show its process dying of a
    fatal signal inside TF's profiler (``wb.ProfilerCrashed``), per its ``faulthandler``
    report of the crashing thread?"""
    crash = output.rfind("Fatal Python error")
    current = output.find("Current thread", crash)
    if crash < 0 or current < 0:
        return False
    innermost = (output[current:].splitlines() + [""])[1]  # the frame after the thread's header line
    return "tensorflow/python/profiler/" in innermost


def log_tail(text: str, lines: int = 12) -> str:
    """The end of an engine's log (``Cluster.engine_output``): its last ``lines`` lines
    without the per-request ones; for a process that crashed, ``faulthandler``'s "Fatal
    Python error" line and the crashing thread's innermost ``lines`` frames."""
    kept = [line for line in text.splitlines() if "Handling apply_request" not in line]
    crash = [i for i, line in enumerate(kept) if line.startswith("Fatal Python error")]
    if not crash:
        return "\n".join(kept[-lines:])
    report = kept[crash[-1]:]
    at = next((i for i, line in enumerate(report) if line.startswith("Current thread")), 0)
    return "\n".join([report[0], *report[at:at + 1 + lines]] if at else report[:1 + lines])
