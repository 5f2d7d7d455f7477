"""Metrics from an engine to the kernel while a run trains.

Rows go three ways: into a window published with ipyparallel's ``publish_data`` (the
kernel polls ``AsyncResult.data``; each publish replaces the last, so the window overlaps
and the kernel de-duplicates by (worker, step)), appended to a JSON-lines file in the run
directory (for re-attaching later), and kept whole for the task's final result.

The window travels packed (``pack``): each row as a tuple of its values beside the tuple
of its keys, which every row with the same keys shares (pickle writes it once). A window
of 2,048 anatomy rows pickled in 0.3 ms instead of 3.5 ms as dicts, and unpickled in the
kernel's IO thread in 0.5 ms instead of 1.5 ms; an MWMS run on digits publishes full
windows, 5 times a second from each worker. The kernel unpacks only the rows it has not
merged yet (``unpack``).

The window holds the rows of the last ``WINDOW_FLUSHES`` publishes (at most ``window``
rows): a kernel that polls at least once in that many publishes (10 s at 5 per second)
misses no row, and at 10 steps/s a publish carries ~100 rows, not up to 2,048: with hundreds of
workers, the kernel's ipyparallel client would otherwise unpickle 2,048 rows per worker
five times a second (issue 25).
"""

from __future__ import annotations

import json
import time
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.common.protocols import Event, EventKind, Published, StepRow

from workbench.store import RunDir

WINDOW_FLUSHES = 50
FILES = "files"  # the published key of run-directory files sent to the kernel (``send_files``)


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
        self._marks: deque[int] = deque(maxlen=WINDOW_FLUSHES)  # len(rows) at each of the last publishes
        self._packed: list[tuple[tuple, tuple]] = []  # rows[self._base:], packed
        self._base = 0
        self._keys: dict[tuple, tuple] = {}  # each key tuple, one object for all its rows
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
        self._packed.append(_pack_row(row, self._keys))
        if len(self._packed) >= 2 * self.window:  # only the last window is ever published
            del self._packed[:-self.window]
            self._base = len(self.rows) - self.window
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
            self._marks.append(len(self.rows))
            start = max(self._marks[0] if len(self._marks) == WINDOW_FLUSHES else 0, len(self.rows) - self.window)
            window: Published = {"packed": self._packed[start - self._base:], "events": self.events[-64:],
                                 "n": len(self.rows)}
            self._publish(window)

    def send_files(self, step: int, files: dict[str, bytes]) -> None:
        """Send ``files`` ({path relative to the run directory: bytes}, written at ``step``)
        to the kernel through ipyparallel, under their own key: the kernel writes them into
        its run directory (``kernel/unshared.py``). Each sending replaces the last."""
        if self._publish is not None:
            self._publish({FILES: {"step": step, "files": files}})

    def close(self) -> None:
        self.flush(force=True)
        self._file.close()


def _pack_row(row: StepRow, keys: dict[tuple, tuple]) -> tuple[tuple, tuple]:
    """(its keys, its values); ``keys`` holds one tuple object per set of keys, shared."""
    names = tuple(row)
    return keys.setdefault(names, names), tuple(row.values())


def pack(rows: list[StepRow]) -> list[tuple[tuple, tuple]]:
    """Rows as a published window carries them (``Publisher.add`` packs each as it comes)."""
    keys: dict[tuple, tuple] = {}
    return [_pack_row(r, keys) for r in rows]


def unpack(packed: list[tuple[tuple, tuple]]) -> list[StepRow]:
    """The rows of a packed window, as dicts."""
    return [dict(zip(keys, values)) for keys, values in packed]
