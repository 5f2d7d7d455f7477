"""Runs and clusters read back from their records under ``$WORKBENCH_HOME``, without a
kernel: the JupyterLab panel, ``wb.runs()``, ``wb.history()`` and ``%wb`` read them, so
they see runs started from any notebook or the CLI, after their kernel has gone."""

import os
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from workbench.common import figures
from workbench.common.pids import alive
from workbench.store import files
from workbench.store.layout import Home, RunDir
from workbench.store.schema import ClusterRecord, RunSummary, State, Status

if TYPE_CHECKING:
    import pandas as pd

SPARK_POINTS = 60  # loss points kept per run for the panel's sparkline


def _alive(pid: int | None) -> bool:
    return bool(pid) and alive(int(pid))


class _Tail:
    """The rows of one metrics file of one attempt of a run, read incrementally: only what
    was appended since the last read is parsed. (A resume rewrites the file, cut back to
    its checkpoint: the next attempt's rows are read by a new tail, from the start.)"""

    def __init__(self, path: Path, attempt: int):
        self.path = path
        self.attempt = attempt
        self.offset = 0
        self.steps = {}  # worker -> (step, time) of its last row
        self.ends = {}  # step -> its end (the latest time a row of it was written): figures.py
        self.rows = {}  # step -> (worker, step time) of its latest row: an asynchronous run's count
        self.last = deque(maxlen=figures.LAST_STEPS)  # (worker, step, loss) of its newest rows: the final loss
        self.losses = Sparkline()

    def update(self) -> None:
        rows, self.offset = files.read_lines(self.path, self.offset)
        for row in rows:
            if "step" not in row:
                continue
            step, t, worker = row["step"], row.get("time", 0.0), row.get("worker", "")
            self.steps[worker] = (step, t)
            if t > self.ends.get(step, -1.0):
                self.ends[step] = t
                self.rows[step] = (worker, row.get("step_time") or 0.0)
            if row.get("loss") is not None:
                self.losses.add(step, row["loss"])
                self.last.append((worker, step, row["loss"]))


class Sparkline:
    """A run's loss by step at a resolution that halves as the run grows: at most
    ``2 * SPARK_POINTS`` buckets of ``stride`` steps, each the mean loss of the rows in it.
    The same rows give the same buckets whether they were read in one go or while the run
    wrote them: the sparkline covers the whole run either way."""

    def __init__(self) -> None:
        self.stride = 1
        self.buckets = {}  # first step of a bucket -> [sum of losses, rows]

    def add(self, step: int, loss: float) -> None:
        key = (step - 1) // self.stride * self.stride + 1
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = [0.0, 0]
        b[0] += loss
        b[1] += 1
        while len(self.buckets) > 2 * SPARK_POINTS:
            self.stride *= 2  # merge pairs of buckets: keys realigned to the wider stride
            merged = {}
            for k, (total, n) in self.buckets.items():
                m = merged.setdefault((k - 1) // self.stride * self.stride + 1, [0.0, 0])
                m[0] += total
                m[1] += n
            self.buckets = merged

    @staticmethod
    def of(tails: "list[Sparkline]") -> list[float]:
        """The mean loss per bucket over several files' sparklines (one per worker), in step
        order, at the coarsest of their strides."""
        stride = max((t.stride for t in tails), default=1)
        merged = {}
        for t in tails:
            for k, (total, n) in t.buckets.items():
                m = merged.setdefault((k - 1) // stride * stride + 1, [0.0, 0])
                m[0] += total
                m[1] += n
        return [total / n for _, (total, n) in sorted(merged.items())]


class Records:
    """Reads every run and cluster under a workbench home; keeps per-file read offsets, so
    polling it every second costs only what was written since."""

    def __init__(self, home: str | os.PathLike | None = None) -> None:
        self.store = Home(home)
        self.home = self.store.path
        self._tails = {}
        self._rates = {}  # run directory -> ((live, files' offsets), steps/s)

    def runs(self, limit: int = 50) -> list[RunSummary]:
        """The newest ``limit`` runs, newest first."""
        dirs = self.store.run_dirs()[:limit]
        listed = {str(d.path) for d in dirs}
        # forget the files of runs deleted or no longer among the newest: polling for hours
        # over many runs keeps only what it lists
        self._tails = {key: tail for key, tail in self._tails.items() if key[0] in listed}
        self._rates = {key: rate for key, rate in self._rates.items() if key in listed}
        return [r for r in (self.run(d) for d in dirs) if r is not None]

    def run(self, run_dir: "str | os.PathLike | RunDir") -> RunSummary | None:
        """One run's summary, or None when its directory holds no record."""
        rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
        started = rd.read_run()
        result = rd.read_result()
        if started is None and result is None:
            return None
        record = {**(started or {}), **(result or {})}
        attempt, first = record.get("attempt", 0), record.get("first_step", 1)
        tails = []
        for path in rd.metrics_files():
            key = (str(rd.path), path.name)
            tail = self._tails.get(key)
            if tail is None or tail.attempt != attempt:
                tail = self._tails[key] = _Tail(path, attempt)
            tail.update()
            tails.append(tail)
        step = max((s[0] for t in tails for s in t.steps.values()), default=0)
        status: Status
        if result is not None:
            status = "failed" if result.get("error") else "stopped" if result.get("stopped") else "finished"
        elif started is not None and _alive(started.get("kernel_pid")):
            status = "running"
        else:
            status = "lost"  # its kernel died before the run could record an end
        steps_per_s = self._steps_per_s(str(rd.path), tails, first, live=status == "running")
        spark = Sparkline.of([t.losses for t in tails])
        stride = max(1, -(-len(spark) // SPARK_POINTS))  # at most SPARK_POINTS, over the whole run
        return {
            "run_id": rd.run_id,  # the directory: a resumed run keeps it
            "run_dir": str(rd.path),
            "status": status,
            "strategy": record.get("strategy"),
            "workers": record.get("workers"),
            "ps": record.get("ps"),
            "steps": record.get("steps"),
            "step": record.get("final_step") or step,  # final_step: written when the run ended
            "loss": self._loss(tails, first),
            "steps_per_s": steps_per_s,
            "sparkline": spark[::stride],
            "error": record.get("error"),
            "notebook": record.get("notebook"),
            "tasks": record.get("tasks", []),
            "tensorboard": rd.tensorboard_dir.is_dir(),
        }

    def _steps_per_s(self, key: str, tails: list[_Tail], first_step: int, live: bool) -> float | None:
        """figures.py's steps/s: over the steps that ended in the last few seconds while the
        run is live (the newest rows of each file only), else the run's own: its newest
        attempt's (steps from ``first_step`` on), after their first fifth (computed again
        only when a file grew). None when too short to measure."""
        read = (live, first_step, tuple(t.offset for t in tails))
        cached = self._rates.get(key)
        if cached is not None and cached[0] == read:
            return cached[1]
        newest = max((row[1] for t in tails for row in t.steps.values()), default=0.0)
        ends = {}
        for t in tails:
            for step, end in reversed(t.ends.items()) if live else t.ends.items():
                if live and end < newest - 2 * figures.RECENT_S:
                    break  # a file's rows are in time order: the rest are older
                if step >= first_step and end > ends.get(step, -1.0):
                    ends[step] = end
        steps = np.fromiter(ends, np.int64, len(ends))
        times = np.fromiter(ends.values(), float, len(ends))
        keep = times >= newest - figures.RECENT_S if live else figures.steady(times)
        value = figures.steps_per_s(steps[keep], times[keep])
        if not live and np.isfinite(value):  # an asynchronous run's steps: the shares of their calls inside
            rows = {step: row for t in tails for step, row in t.rows.items() if step in ends}
            workers = [rows[step][0] for step in ends]
            spans = np.fromiter((rows[step][1] for step in ends), float, len(ends))
            count = figures.asynchronous_count(steps[keep], times[keep], times, spans, workers, len(steps))
            if count is not None:
                value = count.rate
        rate = None if np.isnan(value) else value
        self._rates[key] = (read, rate)
        return rate

    @staticmethod
    def _loss(tails: list[_Tail], first_step: int) -> float | None:
        """figures.py's final loss over the files' newest rows (a worker's newest
        ``LAST_STEPS`` rows hold its rows of the run's last steps), None before any."""
        rows = {(w, s): loss for t in tails for w, s, loss in t.last}  # a row written again: the last one
        steps = np.fromiter((s for _, s in rows), np.int64, len(rows))
        value = figures.final_loss(steps, np.fromiter(rows.values(), float, len(rows)), first_step)
        return None if np.isnan(value) else value

    def clusters(self) -> list[ClusterRecord]:
        """Clusters whose controller (or, when attached, kernel) is alive."""
        return [c for c in self.store.cluster_records()
                if _alive(c.get("controller_pid")) or (c.get("controller_pid") is None and _alive(c.get("kernel_pid")))]

    def state(self) -> State:
        return {"home": str(self.home), "clusters": self.clusters(), "runs": self.runs()}


def runs(home: str | os.PathLike | None = None) -> "pd.DataFrame":
    """The runs recorded under the workbench home (``$WORKBENCH_HOME``), newest first, as a
    DataFrame: whichever kernel, notebook or CLI started them, and whether or not it is
    still alive. ``status`` is running, finished, stopped, failed or lost (its kernel died
    before the run ended)."""
    import pandas as pd

    columns = ["run_id", "status", "strategy", "workers", "ps", "step", "steps", "loss", "error", "notebook",
               "run_dir"]
    return pd.DataFrame([{k: r[k] for k in columns} for r in Records(home).runs(limit=10**6)], columns=columns)


def history(run: str | os.PathLike, home: str | os.PathLike | None = None) -> "pd.DataFrame":
    """Every step row a run wrote (``metrics/*.jsonl``), as ``run.history`` has them, read
    from its run directory: ``run`` is a run id (under the workbench home) or a directory."""
    import pandas as pd

    from workbench.errors import invalid

    rd = RunDir(run) if Path(run).is_dir() else Home(home).run(str(run))
    if not rd.metrics_files():
        raise invalid("run", run, f"a run id or run directory with metrics/*.jsonl (looked in {rd.path})")
    rows = rd.read_metrics({})["rows"]
    if not rows:  # started, no step yet
        return pd.DataFrame(columns=["step", "worker", "loss", "accuracy", "examples_per_s", "step_time", "time"])
    return pd.DataFrame(rows).sort_values(["step", "worker"], kind="stable").reset_index(drop=True)
