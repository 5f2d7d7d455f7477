"""Processes this kernel started: liveness, descendants, reaping. Local PIDs only."""

import glob
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from workbench.common.pids import alive
from workbench.errors import ClusterError


def family(pids: Iterable[int]) -> set[int]:
    """``pids`` and all their descendants."""
    import psutil

    out = set(pids)
    for pid in pids:
        try:
            out.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
    return out


def own(pids: Iterable[int | None]) -> set[int]:
    """Those of ``pids`` that this process started, directly or not, with their descendants:
    what it may end by PID. A PID kept from earlier whose process has ended can name another
    program's process by now (``common.pids``: PIDs are recycled), and its descendants
    would be taken with it (another cluster's controller, say, or its heart monitor)."""
    return family({p for p in pids if p} & descendants())


def descendants() -> set[int]:
    """This process's descendants, now."""
    return family({os.getpid()}) - {os.getpid()}


def reap(pids: Iterable[int | None], deadline: float) -> None:
    """Wait for ``pids`` (processes this object started) to exit; SIGKILL any left. Each is
    known by its PID and start time as this is called: a PID that is recycled while we wait
    is not signalled."""
    import psutil

    processes = []
    for p in {p for p in pids if p}:
        try:
            processes.append(psutil.Process(p))
        except psutil.Error:
            pass

    end = time.monotonic() + deadline
    while time.monotonic() < end and any(running(p) for p in processes):
        time.sleep(0.05)
    for process in processes:
        if running(process):
            try:
                process.send_signal(signal.SIGKILL)  # psutil refuses a recycled PID
            except psutil.Error:
                pass


def running(process: Any) -> bool:
    """Whether the ``psutil.Process`` ``process`` still runs: the same process (psutil checks
    its start time, so a recycled PID is not it) and not a zombie."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_until(cond: Callable[[], object], timeout: float, what: Callable[[], str]) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise ClusterError(f"Timed out after {timeout:.0f} s waiting for {what()}")
        time.sleep(0.05)


def remove_engine_tmpdirs(cluster_tag: str, tmps: Iterable[str] = ()) -> None:
    """Remove the private TMPDIRs of a cluster's engines (``roles.engine_tmpdir``) under
    this machine's temp directory and ``tmps``; the tag is that cluster's alone, so no
    other cluster's files match."""
    from workbench.common.roles import engine_tmpdir

    for tmp in {tempfile.gettempdir(), *tmps}:
        for path in glob.glob(engine_tmpdir(tmp, cluster_tag, "*")):
            shutil.rmtree(path, ignore_errors=True)


def sweep_engine_tmpdirs() -> list[str]:
    """Remove the private TMPDIRs, under this machine's temp directory, of engines whose
    process is gone: those that exited remove their own, but one killed (SIGKILL, by its
    owner's ``ipcluster``, a job's end or the OOM killer) cannot. An engine writes its PID
    there first (``inventory.configure``); a directory without it is starting. Returns what
    was removed."""
    from workbench.common.roles import engine_tmpdir
    from workbench.engine.startup.inventory import ENGINE_PID_FILE

    removed = []
    for path in glob.glob(engine_tmpdir(tempfile.gettempdir(), "*", "*")):
        try:
            pid = int(Path(path, ENGINE_PID_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
