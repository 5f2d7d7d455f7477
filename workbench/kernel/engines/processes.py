"""Processes this kernel started: liveness, descendants, reaping. Local PIDs only."""

import glob
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable

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


def reap(pids: Iterable[int | None], deadline: float) -> None:
    """Wait for ``pids`` (processes this object started) to exit; SIGKILL any left."""
    pids = {p for p in pids if p}
    end = time.monotonic() + deadline
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.05)
    for p in pids:
        if alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


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
