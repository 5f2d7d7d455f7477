"""Whether a process of this machine is alive: what run and cluster records are checked
against (the kernel that wrote them, a cluster's controller), and when it started (a PID
names another process once its own has ended: this machine's ``pid_max`` is 32768 and
TensorFlow's threads draw from the same numbers, so a suite recycles them many times).
Pure os calls."""

import os
from typing import Iterable


def alive(pid: int) -> bool:
    """Is ``pid`` a running process of this machine (a zombie counts as gone)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def started(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``'s 22nd
    field): with the PID, a process's identity. None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().split(")")[-1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def identities(pids: Iterable[int]) -> str:
    """``PID:START`` for each of ``pids`` that is running (``started``), space-separated:
    what a reaper is handed, so that it ends a PID only while it names the same process."""
    listed = ((p, started(p)) for p in sorted(pids))
    return " ".join(f"{p}:{t}" for p, t in listed if t is not None)
