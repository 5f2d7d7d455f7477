"""Metrics from an engine to the kernel while a run trains.

Rows go three ways: into a window published with ipyparallel's ``publish_data`` (the
kernel polls ``AsyncResult.data``; each publish replaces the last, so the window overlaps
and the kernel de-duplicates by (worker, step)), appended to a JSON-lines file in the run
directory (for re-attaching later), and kept whole for the task's final result.

The window holds the rows of the last ``WINDOW_FLUSHES`` publishes (at most ``window``
rows): a kernel that polls at least once in that many publishes (10 s at 5 per second)
misses no row, and at 10 steps/s a publish carries ~100 rows, not up to 2,048: with hundreds of
workers, the kernel's ipyparallel client would otherwise unpickle 2,048 rows per worker
five times a second (issue 25).
"""

import json
import os
import time
from collections import deque

WINDOW_FLUSHES = 50


class Publisher:
    def __init__(self, run_dir, name, interval=0.2, window=2048):
        self.name = name
        self.rows = []
        self.events = []
        self.interval = interval
        self.window = window
        self._last = 0.0
        self._marks = deque(maxlen=WINDOW_FLUSHES)  # len(rows) at each of the last publishes
        os.makedirs(os.path.join(run_dir, "metrics"), exist_ok=True)
        self._file = open(os.path.join(run_dir, "metrics", f"{name}.jsonl"), "a")
        try:
            from ipyparallel.datapub import publish_data
            from ipykernel.kernelbase import Kernel

            self._publish = publish_data if Kernel.initialized() else None
        except ImportError:
            self._publish = None

    def add(self, **row):
        row.setdefault("time", time.time())
        self.rows.append(row)
        self._file.write(json.dumps(row) + "\n")

    def event(self, kind, **info):
        """Something that is not a step: evaluation results, checkpoints, placement."""
        info.update(kind=kind, time=time.time())
        self.events.append(info)
        self._file.write(json.dumps({"event": info}) + "\n")
        self.flush(force=True)

    def flush(self, force=False):
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        self._file.flush()
        if self._publish is not None:
            self._marks.append(len(self.rows))
            start = max(self._marks[0] if len(self._marks) == WINDOW_FLUSHES else 0, len(self.rows) - self.window)
            self._publish({"rows": self.rows[start:], "events": self.events[-64:], "n": len(self.rows)})

    def close(self):
        self.flush(force=True)
        self._file.close()
