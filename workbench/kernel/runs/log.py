"""``RunLog``: what a run has reported, and the tables built from it.

A run's tasks report step rows (one per worker and step) and events (placement,
checkpoints, evaluations, workers lost and replaced, faults injected). They arrive from
several sources, often more than once: the windows each task publishes through
ipyparallel while it trains, its result at the end, its metrics file in the run directory
(a recorded or re-attached run), the kernel's own notes. The log merges each row and event
once, keeps them in arrival order for readers that take only what is new (the dashboard),
and builds ``history``, ``events``, ``placement`` and ``anatomy`` from them, each rebuilt
only when something new arrived. Its ``lines`` (``common/logs.py``'s ``TaskLogs``) keep the tasks'
stdout and stderr beside them. A live ``Run`` and a ``RecordedRun`` each own one; its
``merge`` is also the public way to feed rows (benchmarks, tests).
"""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING, Any, cast

from workbench.common.logs import TaskLogs
from workbench.common.protocols import Event, EventKind, Metrics, Published, StepRow
from workbench.engine.metrics import unpack

if TYPE_CHECKING:
    import pandas as pd

HISTORY_COLUMNS = ["step", "worker", "loss", "accuracy", "examples_per_s", "step_time", "time", "elapsed"]


class RunLog:
    """The rows and events of one run. ``started``: the time ``elapsed`` counts from (it may
    be moved earlier: a recorded run's first row); ``links``: a test bed's ``LinkWatch``
    whose samples ``history`` joins (None off a bed); ``steps_per_execution``: the steps of
    one call, which ``anatomy`` skips the first two of by default."""

    def __init__(self, started: float, steps_per_execution: int = 1, links: Any = None) -> None:
        self.started = started
        self.steps_per_execution = steps_per_execution
        self.links = links
        self.lines = TaskLogs()  # the tasks' stdout and stderr
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, int], StepRow] = {}  # (worker, step) -> its latest row
        self._log: list[StepRow] = []  # rows in arrival order (a row sent again with other values: twice)
        self._overwritten = False  # some row came again with other values: the last one counts
        self._published: dict[str, int] = {}  # source -> rows of it merged (each publish counts them)
        self._workers: set[str] = set()
        self._events: list[Event] = []
        self._seen_events: set[tuple[Any, ...]] = set()
        self._version = 0  # how many distinct rows have arrived
        self._max_step = 0
        # the tables, each built once per change of what it reads
        self._build = threading.Lock()  # one history builder at a time: each appends what is new
        self._built = 0  # rows of _log in _frame
        self._frame: pd.DataFrame | None = None
        self._history: tuple[int, pd.DataFrame | None] = (-1, None)  # (version, history)
        self._joined: tuple[Any, pd.DataFrame | None] = (None, None)  # ((version, link samples), with links)
        self._anatomy: tuple[Any, pd.DataFrame | None] = (None, None)  # ((version, links, skip), table)
        self._placement: tuple[int, Any] = (-1, None)  # (events, placement frame)

    # -- what arrives ----------------------------------------------------------------------
    def merge(self, data: Published | Metrics | None, source: str | None = None) -> tuple[list, list]:
        """Merge rows and events; returns those that are new. ``data`` is what a task
        published (``source``: its name; each publish carries a window of its newest rows,
        packed, and how many it has made: only those not merged yet are unpacked) or plain
        ``{"rows": [...], "events": [...]}`` (a task's result, a metrics file: rows merged by
        worker and step, events by kind, step, time and task)."""
        if not data:
            return [], []
        data = dict(data)  # one consistent publish: ipyparallel updates this dict in place
        with self._lock:
            rows = data.get("rows", ())
            n = data.get("n")
            if source is not None and n is not None:
                packed = data.get("packed", ())
                seen = self._published.get(source, 0)
                if n < seen:  # a replacement engine started afresh
                    seen = 0
                rows = unpack(packed[max(0, len(packed) - (n - seen)):]) if n > seen else ()
                self._published[source] = n
            for row in rows:
                key = (row["worker"], row["step"])
                old = self._rows.get(key)
                if old is None:
                    self._version += 1
                    if row["step"] > self._max_step:
                        self._max_step = row["step"]
                    self._log.append(row)
                    self._workers.add(row["worker"])
                elif old != row:
                    self._version += 1
                    self._overwritten = True
                    self._log.append(row)
                self._rows[key] = row
            fresh = []
            for ev in data.get("events", ()):
                key = event_key(ev)
                if key not in self._seen_events:
                    self._seen_events.add(key)
                    self._events.append(ev)
                    fresh.append(ev)
        return list(rows), fresh

    def note(self, kind: EventKind, **info: Any) -> Event:
        """Record an event the kernel observed (a worker lost, a replacement started, a
        fault injected on a test bed): a ``TaskEvent`` or a ``FaultEvent``. Returns it."""
        event = cast(Event, dict(info, kind=kind, time=time.time()))  # the keys ``kind``'s protocol names
        with self._lock:
            self._events.append(event)
            self._seen_events.add(event_key(event))  # read back from its file (a re-attached run's tail): once
        return event

    def restart_source(self, source: str) -> None:
        """``source``'s next publish counts its rows from 0 (a replacement engine took its task)."""
        with self._lock:
            self._published.pop(source, None)

    # -- what it holds -----------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The highest step any worker has reported."""
        return self._max_step

    @property
    def rows(self) -> int:
        """How many distinct (worker, step) rows have arrived."""
        return len(self._rows)

    @property
    def version(self) -> int:
        """Grows with every new or changed row (a cache key)."""
        return self._version

    @property
    def event_count(self) -> int:
        """How many events have arrived (a cache key: events only grow)."""
        return len(self._events)

    def first_time(self) -> float | None:
        """The earliest time of any row (None before the first)."""
        with self._lock:
            return min((r["time"] for r in self._rows.values()), default=None)

    def reporting(self) -> set[str]:
        """The workers that have reported a step."""
        with self._lock:
            return set(self._workers)

    def last_steps(self) -> dict[str, int]:
        """{worker: the highest step it reported}."""
        with self._lock:
            last: dict[str, int] = {}
            for (w, s) in self._rows:
                last[w] = max(last.get(w, 0), s)
            return last

    def rows_since(self, cursor: int) -> tuple[list[StepRow], int]:
        """(rows that arrived after ``cursor``, the new cursor): the live dashboard's feed."""
        with self._lock:
            return self._log[cursor:], len(self._log)

    def events_of(self, kind: str) -> list[Event]:
        """The events of one kind, in arrival order."""
        with self._lock:
            return [e for e in self._events if e["kind"] == kind]

    def checkpoint_steps(self) -> list[int]:
        """The steps of the checkpoints the run's chief saved (those a resume can start from), in order."""
        return [e["step"] for e in self.events_of("checkpoint")]

    # -- tables ------------------------------------------------------------------------------
    @property
    def history(self) -> pd.DataFrame:
        """One row per (worker, step), the latest of each (``Run.history`` says what is in
        it), joined with the links' bytes on a test bed. A copy: callers may change it."""
        with self._build:  # one builder at a time: each appends what is new to the frame
            with self._lock:
                version = self._version
                if self._history[0] != version:  # built once per new row, not once per call
                    new, overwritten = self._log[self._built:], self._overwritten
                    self._built += len(new)
                else:
                    new = None
            df = self._history[1] if new is None else self._history_frame(new, overwritten, version)
            return self._with_links(df, version).copy()

    def _history_frame(self, new, overwritten, version):
        import pandas as pd

        cols = list(HISTORY_COLUMNS)
        if not new and self._frame is None:
            df = pd.DataFrame(columns=cols)
            self._history = (version, df)
            return df
        # only the rows new since the last build become a frame: building every row again
        # on each call cost O(rows) of Python per call (issue 25)
        df = pd.DataFrame(new)
        if self._frame is not None:
            df = pd.concat([self._frame, df], ignore_index=True) if len(df) else self._frame
        self._frame = df
        if overwritten:  # a row sent again with other values: the last one counts
            df = df.drop_duplicates(["worker", "step"], keep="last")
        df = df.sort_values(["step", "worker"], kind="stable")
        df["elapsed"] = df["time"] - self.started
        if "staleness" in df:  # asynchronous runs: other updates applied during each step
            cols.append("staleness")
        cols += [c for c in df.columns if c not in cols and c != "replicas"]  # the run's metrics
        df = df[cols].reset_index(drop=True)
        self._history = (version, df)
        return df

    def _with_links(self, df, version):
        """Runs across test-bed hosts: per host, bytes sent/received per step and link
        utilisation (``link_tx_bytes_<host>``, ``link_rx_bytes_<host>``, ``link_util_<host>``)."""
        if self.links is None:
            return df
        key = (version, self.links.count)  # joined once per new row or link sample, not per call
        if self._joined[0] != key:
            self._joined = (key, self.links.join(df))
        return self._joined[1]

    def anatomy(self, steps: int, skip: int | None = None, first_step: int = 1) -> pd.DataFrame:
        """``Run.anatomy``'s table; ``steps``: the run's target and ``first_step`` its newest
        attempt's first step, which decide the default skip: that attempt's first two calls
        (a resume traces again)."""
        from workbench.common import anatomy

        spe = self.steps_per_execution
        if skip is None:
            skip = anatomy.traced(first_step, spe) if steps - first_step + 1 > 4 * spe else first_step - 1
        key = (self._version, None if self.links is None else self.links.count, skip)
        if self._anatomy[0] != key:  # the dashboard asks every second: rebuilt only when rows arrived
            self._anatomy = (key, anatomy.table(self.history, skip=skip))
        return self._anatomy[1].copy()

    @property
    def evaluations(self) -> pd.DataFrame:
        """Every evaluation (step, test metrics), in order."""
        import pandas as pd

        rows = [{k: v for k, v in e.items() if k not in ("kind", "time")} for e in self.events_of("eval")]
        columns = ["step", "test_accuracy", "test_loss"]
        return pd.DataFrame(rows, columns=columns + sorted({k for r in rows for k in r} - set(columns)))

    @property
    def events(self) -> pd.DataFrame:
        """Every event but placement (and its sparse gradients), in time order, as a DataFrame
        (kind, step, then the rest)."""
        import pandas as pd

        with self._lock:
            rows = [{k: v for k, v in e.items() if k not in ("tasks", "variables")}
                    for e in self._events if e["kind"] not in ("placement", "sparse_gradients")]
        df = pd.DataFrame(rows)
        if df.empty:
            return pd.DataFrame(columns=["kind", "step", "time"])
        if "step" not in df:  # only events that name no step (a profile's: its first and last)
            df["step"] = None
        df = df.sort_values("time", kind="stable").reset_index(drop=True)
        return df[["kind", "step"] + [c for c in df.columns if c not in ("kind", "step")]]

    @property
    def placement(self) -> pd.DataFrame:
        """``Run.placement``: built once per new event (events only grow). A copy."""
        count = len(self._events)
        if self._placement[0] != count:
            self._placement = (count, self._placement_frame(count))
        return self._placement[1].copy()

    def _placement_frame(self, count):
        import pandas as pd

        cols = ["role", "task", "engine", "host", "pid", "device", "variable", "shape", "bytes", "kind", "trainable",
                "sparse_bytes"]
        rows, tasks, sparse = {}, {}, {}
        for ev in self._events[:count]:
            if ev["kind"] == "sparse_gradients":  # as every replica traced its step: the same on each
                sparse.update({v["variable"]: v["bytes"] for v in ev["variables"]})
            if ev["kind"] != "placement":
                continue
            for t in ev["tasks"]:  # a replaced worker: its latest engine
                tasks[(t.get("role"), t.get("task"))] = {
                    **{k: t.get(k) for k in ("role", "task", "engine", "host", "pid")},
                    "device": ", ".join(t.get("devices", []))}
            for v in ev["variables"]:  # a replacement engine reports its task's variables again: the latest
                role, task = job_task(v["device"])
                rows[(v["device"], v["variable"])] = {
                    "role": role, "task": task, "device": v["device"], "variable": v["variable"], "shape": v["shape"],
                    "bytes": v["bytes"], "kind": v.get("kind", "model"), "trainable": v.get("trainable")}
        for row in rows.values():  # a sparse gradient's bytes a replica sends per step (None: dense)
            row["sparse_bytes"] = sparse.get(row["variable"]) if row["kind"] == "model" else None
        rank = {"chief": 0, "ps": 1, "worker": 2, "local": 3}
        df = pd.DataFrame(list(tasks.values()) + list(rows.values()), columns=cols)
        # tasks report in any order: sort so the table reads the same every time
        # tasks, then model variables, then optimizer state
        df["_kind"] = df.variable.notna().astype(int) + (df.kind == "optimizer").astype(int)
        df["_rank"] = df.role.map(rank).fillna(9)
        df["_seq"] = range(len(df))
        df = df.sort_values(["_kind", "_rank", "task", "_seq"], kind="stable").drop(columns=["_kind", "_rank", "_seq"])
        return df.reset_index(drop=True).astype({"task": "Int64", "engine": "Int64", "pid": "Int64", "bytes": "Int64",
                                                 "sparse_bytes": "Int64"})


def job_task(device: str | None) -> tuple[str, int]:
    """("ps", 0) from "/job:ps/replica:0/task:0/device:CPU:0"; ("local", 0) without a job."""
    m = re.search(r"/job:([^/]+)/replica:\d+/task:(\d+)", device or "")
    if not m or m.group(1) == "localhost":
        return "local", 0
    return m.group(1), int(m.group(2))


def event_key(ev: Event) -> tuple[Any, ...]:
    """What makes an event the same event when it arrives again (every publish repeats the
    last events; files repeat what was published): kind, step, time and whose it is. Two
    MWMS workers publish their placement at the same microsecond when the collective that
    builds their variables releases them together: without the tasks in the key one of
    them was dropped (seen once in a Slurm run's placement, one task of two)."""
    tasks = tuple((t.get("role"), t.get("task")) for t in ev.get("tasks", ()) or ())
    return ev["kind"], ev.get("step"), ev["time"], tasks, ev.get("worker"), ev.get("task")
