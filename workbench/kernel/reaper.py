"""Ends a local cluster's processes when the kernel that owns it dies without stopping it
(SIGKILL, a crash): ``atexit`` never runs then.

    python -m workbench.kernel.reaper OWNER_PID PIDFILE

Polls twice a second. When OWNER_PID is gone, it ends every PID listed in PIDFILE, with
their descendants (SIGTERM, then SIGKILL after 5 s), and exits. When PIDFILE disappears
(the cluster was stopped normally), it exits at once.
"""

import os
import sys
import time


def main(owner, pidfile):
    from workbench.kernel.processes import alive, family, reap

    while alive(owner):
        if not os.path.exists(pidfile):
            return 0
        time.sleep(0.5)
    try:
        with open(pidfile) as f:
            pids = {int(p) for p in f.read().split()}
    except OSError:
        return 0
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
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2]))
