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


def held(targets: Sequence[str], within: float = 0.0) -> list[str]:
    """The ``"address:port"`` targets something still listens on ("open"), asked again until
    none is or ``within`` seconds have passed: ended engines' TF ports that a replacement
    given the same port could not bind yet ("Could not start gRPC server")."""
    import time

    end = time.monotonic() + within
    while True:
        still = [t for t, a in answers(targets, timeout=1.0).items() if a == "open"]
        if not still or time.monotonic() >= end:
            return still
        time.sleep(0.1)


def unreachable(targets: Sequence[str], timeout: float = 2.0) -> list[str]:
    """The ``"address:port"`` targets that refuse or ignore a TCP connection from here."""
    return [t for t, a in answers(targets, timeout).items() if a != "open"]


def _threads(report: list[str]) -> list[list[str]]:
    """The thread blocks of a ``faulthandler`` report: each its header line ("Current
    thread 0x…" or "Thread 0x…") and its frames, innermost first."""
    blocks: list[list[str]] = []
    for line in report:
        if line.startswith(("Thread 0x", "Current thread 0x")):
            blocks.append([line])
        elif blocks and line.startswith("  File "):
            blocks[-1].append(line)
    return blocks


def crashed_in_profiler(output: str) -> bool:
    """Does an engine's last output (``Cluster.engine_output``) show its process dying of a
    fatal signal inside TF's profiler (``wb.ProfilerCrashed``), per its ``faulthandler``
    report? The crashing thread's innermost frame is in TF's profiler; or, when the signal
    hit a thread without Python (one of TF's own: the report then has no "Current thread"),
    a Python thread's innermost frame is (the one that called the profiler and waits in it)."""
    crash = output.rfind("Fatal Python error")
    if crash < 0:
        return False
    blocks = _threads(output[crash:].splitlines())
    current = [b for b in blocks if b[0].startswith("Current thread")]
    return any(len(b) > 1 and "tensorflow/python/profiler/" in b[1] for b in current or blocks)


def log_tail(text: str, lines: int = 12) -> str:
    """The end of an engine's log (``Cluster.engine_output``): its last ``lines`` lines
    without the per-request ones; for a process that crashed, ``faulthandler``'s "Fatal
    Python error" line and the crashing thread's innermost ``lines`` frames, or, when the
    signal hit a thread without Python, each Python thread's header and innermost frame
    (the main thread, listed last by ``faulthandler``, first), within ``lines`` lines."""
    kept = [line for line in text.splitlines() if "Handling apply_request" not in line]
    crash = [i for i, line in enumerate(kept) if line.startswith("Fatal Python error")]
    if not crash:
        return "\n".join(kept[-lines:])
    report = kept[crash[-1]:]
    blocks = _threads(report)
    current = [b for b in blocks if b[0].startswith("Current thread")]
    if current:
        return "\n".join([report[0], *current[0][:1 + lines]])
    if blocks:
        return "\n".join([report[0], *[line for b in reversed(blocks) for line in b[:2]][:lines]])
    return "\n".join(report[:1 + lines])
