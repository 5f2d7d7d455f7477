"""Metrics from an engine to the kernel while a run trains.

Rows go three ways: into a window published with ipyparallel's ``publish_data`` (the
kernel polls ``AsyncResult.data``; each publish replaces the last, so the window overlaps
and the kernel de-duplicates by (worker, step)), appended to a JSON-lines file in the run
directory (for re-attaching later), and kept whole for the task's final result.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.common.protocols import Event, EventKind, Published, StepRow

from workbench.store import RunDir


class Publisher:
    """One task's publisher: ``add`` a step row, ``event`` anything else, ``flush`` at most
    every ``interval`` seconds (the last ``window`` rows and 64 events), ``close`` at the end."""

    def __init__(self, run_dir: str, name: str, interval: float = 0.2, window: int = 2048) -> None:
        self.name = name
        self.rows: list[StepRow] = []
        self.events: list[Event] = []
        self.interval = interval
        self.window = window
        self._last = 0.0
        path = RunDir(run_dir).metrics_file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a")
        try:
            from ipyparallel.datapub import publish_data
            from ipykernel.kernelbase import Kernel

            self._publish = publish_data if Kernel.initialized() else None
        except ImportError:
            self._publish = None

    def add(self, **row: Any) -> None:
        """One step of one worker: the keys of ``StepRow``, plus the run's metrics."""
        row.setdefault("time", time.time())
        self.rows.append(row)
        self._file.write(json.dumps(row) + "\n")

    def event(self, kind: EventKind, **info: Any) -> None:
        """Something that is not a step: evaluation results, checkpoints, placement."""
        info.update(kind=kind, time=time.time())
        self.events.append(info)
        self._file.write(json.dumps({"event": info}) + "\n")
        self.flush(force=True)

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        self._file.flush()
        if self._publish is not None:
            window: Published = {"rows": self.rows[-self.window:], "events": self.events[-64:]}
            self._publish(window)

    def close(self) -> None:
        self.flush(force=True)
        self._file.close()
