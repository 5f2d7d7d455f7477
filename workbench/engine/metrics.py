"""Metrics from an engine to the kernel while a run trains.

Rows go three ways: into a window published with ipyparallel's ``publish_data`` (the
kernel polls ``AsyncResult.data``; each publish replaces the last, so the window overlaps
and the kernel de-duplicates by (worker, step)), appended to a JSON-lines file in the run
directory (for re-attaching later), and kept whole for the task's final result.
"""

import json
import time

from workbench.store import RunDir


class Publisher:
    def __init__(self, run_dir, name, interval=0.2, window=2048):
        self.name = name
        self.rows = []
        self.events = []
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
            self._publish({"rows": self.rows[-self.window:], "events": self.events[-64:], "n": len(self.rows)})

    def close(self):
        self.flush(force=True)
        self._file.close()
