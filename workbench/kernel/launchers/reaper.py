"""Reapers: watchdog processes that clean up after a kernel that dies without doing it
itself (SIGKILL, a crash): ``atexit`` never runs then.

A reaper polls twice a second. While its owner lives and its record (a file) exists, it
waits; when the record disappears (the owner cleaned up normally), it exits at once; when
the owner dies first, it cleans up from the record and exits. ``spawn`` starts one,
``watch`` is its loop. Two use it: local clusters (this module's ``main``: the record
lists the cluster's PIDs) and ``wb.testbed`` (the record is the bed's state).

    python -m workbench.kernel.launchers.reaper OWNER_PID PIDFILE

ends every PID listed in PIDFILE, with their descendants (SIGTERM, then SIGKILL after 5 s),
when OWNER_PID is gone.
"""

import os
import subprocess
import sys
import time
from typing import Callable

from workbench.common.pids import started
from workbench.kernel.engines.processes import alive, family, reap, remove_engine_tmpdirs


def spawn(module: str, *args: str) -> subprocess.Popen:
    """Start ``python -m module *args`` as a reaper of this process: in a session of its
    own (a Ctrl-C in the kernel's terminal must not reach it), without stdio."""
    return subprocess.Popen([sys.executable, "-m", module, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def watch(owner: int, record: str, cleanup: Callable[[str], None], every: float = 0.5) -> int:
    """Wait while ``owner`` lives; exit when ``record`` disappears first; else run
    ``cleanup(record)``. Returns the reaper's exit code (0)."""
    born = started(owner)
    while alive(owner) and started(owner) == born:  # not another process under its PID
        if not os.path.exists(record):
            return 0
        time.sleep(every)
    cleanup(record)
    return 0


def end_listed(pidfile: str, owner: int | None = None) -> None:
    """End the PIDs listed in ``pidfile`` and their descendants; remove the list, the
    cluster's record beside it (what the Workbench panel shows), its local engines' private
    TMPDIRs and the owner's zygote sockets (``kernel/zygote.py``)."""
    try:
        with open(pidfile) as f:
            tokens = f.read().split()
    except OSError:
        return
    pids = set()
    for token in tokens:  # PID:START; a PID that started at another time names another process now
        pid, _, start = token.partition(":")
        if pid.isdigit() and start.isdigit() and started(int(pid)) == int(start):
            pids.add(int(pid))
    processes = family(pids)
    for pid in processes:
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass
    reap(processes, deadline=5)
    from pathlib import Path

    from workbench.store import Home

    pids_path = Path(pidfile)  # <home>/clusters/<id>.pids
    record = Home(pids_path.parent.parent).cluster_record(pids_path.stem)
    for path in (pids_path, record):  # the PIDs, the panel's record
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
    remove_engine_tmpdirs(pids_path.stem)
    if owner is not None:
        from workbench.kernel.launchers import zygote

        zygote.remove_leftovers(owner)


def main(owner: int, pidfile: str) -> int:
    return watch(owner, pidfile, lambda record: end_listed(record, owner))


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2]))
