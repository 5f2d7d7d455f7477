"""The kernel's run directory for tasks on hosts that do not see it (no shared filesystem):
what those tasks write there on their own host reaches the kernel's copy while the run
trains, through ipyparallel, so that the panel, the CLI, other kernels and a resume find it
here even if the host is lost before the end.

- Metrics and logs: the rows and events each task publishes (``publish_data``) are
  appended to its metrics file here, and its stdout and stderr lines to its log file, as
  its engine writes them there.
- Checkpoints: the chief sends each checkpoint's files and the TensorBoard logs when it
  saves one (``engine/loop.save``); they are written here, the state file last, and the
  checkpoints its manager no longer keeps are deleted.
- Stop: the CLI and the panel ask by the STOP file here, which those hosts do not see;
  the run's watcher forwards it through ipyparallel (``Watcher.request_stop``). With no live
  kernel watching the run, nobody forwards it.

At the end of the run the engines that are still there send each of those files that
differs from the copy here (``pull_run_files``), which replaces it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from workbench.engine import rundir
from workbench.engine.metrics import FILES
from workbench.store import RunDir


class Mirror:
    """The kernel's copy of what the tasks ``names`` (on hosts without ``run_dir``) write."""

    def __init__(self, run_dir: str | Path, names: Iterable[str]) -> None:
        self.store = RunDir(run_dir)
        self.names = set(names)
        self._stop_forwarded = False
        self._failed = False  # writing here failed once (said once)

    def take(self, name: str, data: Any, rows: list, events: list, lines: list = ()) -> str | None:
        """What task ``name`` published (``data``: its ``AsyncResult.data``), with the
        ``rows``, ``events`` and log ``lines`` (``common/logs.py``'s entries) in it that are
        new: appended to its metrics and log files, and files it sent written here. Returns
        the error the first time writing here fails (a full disk), else None."""
        if name not in self.names:
            return None
        sent = data.get(FILES) if data else None
        try:
            self.store.append_metrics(name, rows, events)
            self.store.append_logs(name, [(t, stream, text) for t, _, stream, text, _ in lines])
            if sent:
                rundir.write_files(str(self.store.path), sent["files"])
                self.store.prune_checkpoints()
        except OSError as e:
            if self._failed:
                return None
            self._failed = True
            return f"{type(e).__name__}: {e}"
        finally:  # written (or not: the next checkpoint comes whole): the kernel need not hold them
            if sent is not None and data.get(FILES) is sent:
                data.pop(FILES, None)
        return None

    def stop_to_forward(self) -> bool:
        """True once, when a STOP file appeared here (the CLI, the panel, a dashboard)."""
        if self._stop_forwarded or not self.store.stop_requested():
            return False
        self._stop_forwarded = True
        return True


def push_run_files(client: Any, tasks: Sequence[Any], run_dir: str, timeout: float) -> None:
    """Before ``tasks`` start on hosts that do not see ``run_dir``: copy to each engine what
    its task reads there (``RunDir.read_by``: the checkpoints a resume restores, its metrics
    file as the kernel kept it), through ipyparallel."""
    from workbench.engine import rundir
    from workbench.store import RunDir

    pending = []
    for t in tasks:
        files = rundir.read_files(run_dir, RunDir(run_dir).read_by(t.name))
        if files:
            pending.append(client[t.engine_id].apply_async(rundir.write_files, run_dir, files))
    for ar in pending:
        ar.get(timeout=timeout)


def pull_run_files(client: Any, tasks: Sequence[Any], run_dir: str, chief: str | None, timeout: float) -> int:
    """After a run: copy into this machine's ``run_dir`` what ``tasks`` wrote there on hosts
    that do not see it (``RunDir.written_by``; ``chief``: the name of the run's chief task),
    through ipyparallel. Engines that do not answer within ``timeout`` seconds in all (lost,
    or blocked in a collective) are left out. Returns the number of files copied (those
    that differ from this machine's copy)."""
    import time

    from workbench.engine import rundir
    from workbench.store import RunDir

    end = time.monotonic() + timeout
    pending = []
    for t in tasks:  # each file is sent only if it differs from this machine's copy (checkpoints sent live do not)
        parts = RunDir(run_dir).written_by(t.name, t.name == chief)
        pending.append(client[t.engine_id].apply_async(rundir.read_files, run_dir, parts,
                                                       rundir.digests(run_dir, parts)))
    copied = 0
    for ar in pending:
        try:
            files = ar.get(timeout=max(0.1, end - time.monotonic()))
        except Exception:  # noqa: BLE001 - that engine's files stay on its host
            continue
        copied += rundir.write_files(run_dir, files)
    return copied

