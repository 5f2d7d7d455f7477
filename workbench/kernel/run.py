"""``Run``: the kernel's handle on one training run that executes on engines.

A watcher thread merges the engines' published metrics into ``history`` while the run
trains, notices failures and stalls, and stops hung peers. It sends nothing on the
ipyparallel client but stop requests (``client.abort``, which hands its message to the
client's IO thread); engine replacement happens on the next call that needs the cluster,
in the caller's thread. For tasks on hosts without the run directory it keeps the
kernel's copy of what they write there current (``kernel/unshared.py``).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, cast

from workbench.common import strategies
from workbench.common.protocols import Event, EventKind, Metrics, Published, ServerResult, StepRow, TaskResult
from workbench.errors import EngineError, RunStalled, RunStopped
from workbench.engine.metrics import unpack
from workbench.kernel.dashboard import Dashboard
from workbench.kernel import unshared as unshared_dir
from workbench.kernel.recovery import EngineWatch
from workbench.store import ResultRecord, RunDir

if TYPE_CHECKING:
    import pandas as pd

_POLL = 0.05
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _job_task(device):
    """("ps", 0) from "/job:ps/replica:0/task:0/device:CPU:0"; ("local", 0) without a job."""
    m = re.search(r"/job:([^/]+)/replica:\d+/task:(\d+)", device or "")
    if not m or m.group(1) == "localhost":
        return "local", 0
    return m.group(1), int(m.group(2))


class Run:
    """A training run on a cluster's engines (``Cluster.train`` returns one).

    ``started``: when it started (default: now; a re-attached run's own start time);
    ``tail``: a re-attached run's reader of the rows its engines published before this
    kernel watched it (returns ``{"rows": [...], "events": [...]}`` of what is new)."""

    def __init__(self, cluster: Any, job: Any, tasks: list, results: dict, stall_timeout: float,
                 start_timeout: float, *, started: float | None = None,
                 tail: Callable[[], Metrics] | None = None, unshared: Iterable[str] = ()) -> None:
        self.cluster = cluster
        self.job = job
        self.tasks = tasks
        self.run_dir = Path(job.run_dir)
        self.stall_timeout = stall_timeout
        self.start_timeout = start_timeout
        self._results: dict[str, Any] = results  # {task name: AsyncResult}
        self._rows: dict[tuple[str, int], StepRow] = {}  # (worker, step) -> row
        self._version = 0  # how many distinct rows have arrived
        self._max_step = 0
        self._history: tuple[int, pd.DataFrame | None] = (-1, None)  # (version, DataFrame) cache of ``history``
        self._joined: tuple[Any, pd.DataFrame | None] = (None, None)  # ((version, link samples), history with links)
        self._anatomy: tuple[Any, pd.DataFrame | None] = (None, None)  # ((version, links, skip), anatomy table)
        self._events: list[Event] = []
        self._seen_events: set[tuple[Any, ...]] = set()
        self._outcome: dict[str, TaskResult | ServerResult] = {}  # task name -> what the task returned
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._started = started or time.time()
        self._finished = None
        self._done = threading.Event()
        self._dashboard = None
        self._profiles = 0  # profile requests made (each one's traces go to profile/<n>)
        self._tail = tail  # re-attached runs: reads the metrics files (rows published before)
        # hosts whose engines do not see the run directory: what they write there is
        # copied here when the run ends (``remote.pull_run_files``)
        self.unshared_hosts = sorted(unshared)
        self._mirror = unshared_dir.Mirror(self.run_dir, [t.name for t in tasks if t.host in self.unshared_hosts]) \
            if self.unshared_hosts else None
        spec = strategies.spec(job.strategy)
        self._chief = next((t.name for t in tasks if (t.role == spec.chief_role if spec.chief_role else t.index == 0)),
                           None)
        self._sync = spec.synchronous  # lockstep workers: a lost one can hang the others
        # asynchronous runs outlive a lost worker: the workbench brings a replacement up
        self._engines = EngineWatch(self, replace_workers=spec.has_ps)
        from workbench.kernel import links

        self._links = links.watch(self)  # a run across test-bed hosts: its links' bytes, sampled
        self._thread = threading.Thread(target=self._watch, name=f"workbench-run-{job.run_id}", daemon=True)
        self._thread.start()

    # -- public ------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.job.run_id

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the run's watcher has recorded its end (at most ``timeout`` s); True
        if it has. Unlike ``wait`` it raises nothing and leaves the cluster alone."""
        return self._done.wait(timeout)

    @property
    def failure(self) -> BaseException | None:
        """The error the run ended with (what ``wait()`` raises), or None."""
        return self._error

    @property
    def started(self) -> float:
        """When the run started (``time.time()``): ``elapsed`` in ``history`` counts from it."""
        return self._started

    @property
    def step(self) -> int:
        """The highest step any worker has reported."""
        return self._max_step

    def wait(self, timeout: float | None = None) -> "Run":
        """Block until the run ends; raise the engines' error (with role and traceback) if any."""
        if not self._block(timeout):
            raise TimeoutError(f"Run {self.id} still running after {timeout} s (step {self.step}/{self.job.steps})")
        if self._error is None:
            self.cluster.pool.heal()
            return self
        try:  # engines the failure left unusable are replaced now, where their host answers
            self.cluster.pool.heal(reachable_only=True)
        except Exception as e:  # noqa: BLE001 - the run's own error is what wait() reports
            self.note("engines_not_replaced", error=f"{type(e).__name__}: {e}", step=self.step)
        raise self._error

    def dashboard(self, interval: float = 0.25, baseline: Any = None) -> Dashboard:
        """The live dashboard widget (shown by default when a run starts in a notebook).

        ``baseline``: a finished single-worker ``Run`` (or its examples/s) to show scaling
        efficiency = total throughput / (workers x baseline)."""
        if self._dashboard is None or baseline is not None:
            self._dashboard = Dashboard(self, interval=interval, baseline=baseline)
        return self._dashboard

    def _block(self, timeout):
        """Wait for the end of the run. Interrupting the kernel (Ctrl-C, or the notebook's
        stop button) while waiting stops the run cleanly, keeping a checkpoint, then lets
        the interrupt through: a kernel busy in a cell cannot handle widget clicks, so the
        dashboard's Stop button works while the kernel is free, and an interrupt while not."""
        try:
            return self._done.wait(timeout)
        except KeyboardInterrupt:
            print(f"Interrupted: stopping run {self.id} at its next agreed step...", flush=True)
            self._request_stop()
            self._done.wait(60)
            print(f"Run {self.id} stopped at step {self.final_step}; its last checkpoint is in {self.run_dir}.")
            raise

    def stop(self, timeout: float = 60) -> "Run":
        """Ask every task to stop at its next agreed step, save a checkpoint, and wait."""
        self._request_stop()
        self._done.wait(timeout)
        self.cluster.pool.heal()
        return self

    def _request_stop(self):
        """The STOP file in the run directory, and the same request through ipyparallel to
        tasks still running (engines on hosts without the run directory see that one)."""
        RunDir(self.run_dir).request_stop()
        running = [(t.engine_id, self._results[t.name]) for t in list(self.tasks)
                   if t.name in self._results and not self._results[t.name].ready()]
        self.cluster.pool.send_stop(running)

    @property
    def stopped(self) -> bool:
        return any(r.get("stopped") for r in self._outcome.values())

    @property
    def status(self) -> str:
        """running, finished, stopped or failed (as ``wb.runs()`` and ``wb.load`` say it)."""
        if not self.done:
            return "running"
        return "failed" if self._error is not None else "stopped" if self.stopped else "finished"

    @property
    def error(self) -> str | None:
        """The first line of the error the run ended with, or None."""
        return None if self._error is None else str(self._error).splitlines()[0]

    @property
    def checkpoint(self) -> int | None:
        """The step of the run's last checkpoint (where a resume starts), or None."""
        return RunDir(self.run_dir).checkpoint_step()

    @property
    def history(self) -> pd.DataFrame:
        """One row per (worker, step): loss, batch accuracy, examples/s, step time, seconds
        since the run started (and, for parameter-server runs, the step's staleness), then
        a column per metric of ``train(metrics=...)``: its value on the worker's batch.
        With ``anatomy=True`` (the default) also the step anatomy's seconds
        (``input_time``, ``compute_time``, ``comm_time``; ``wait_time`` under a parameter
        server). ``comm_bytes``: the bytes the worker handed to the all-reduce that step
        (counted from the tensors sent, after ``compression``; a worker with several
        replicas, as under "mirrored", counts all of theirs), in every run that
        all-reduces, with or without the anatomy. Grows while the run trains."""
        with self._lock:
            stream = self._stream()
        with stream["build"]:  # one builder at a time: each appends what is new to the frame
            with self._lock:
                version = self._version
                if self._history[0] == version:  # built once per new row, not once per call
                    return self._with_links(self._history[1], version).copy()
                new, overwritten = stream["log"][stream["built"]:], stream["overwritten"]
                stream["built"] += len(new)
            df = self._history_frame(stream, new, overwritten, version)
            return self._with_links(df, version).copy()

    def _history_frame(self, stream, new, overwritten, version):
        import pandas as pd

        cols = ["step", "worker", "loss", "accuracy", "examples_per_s", "step_time", "time", "elapsed"]
        if not new and stream["frame"] is None:
            return pd.DataFrame(columns=cols)
        # only the rows new since the last build become a frame: building every row again
        # on each call cost O(rows) of Python per call (issue 25)
        df = pd.DataFrame(new)
        if stream["frame"] is not None:
            df = pd.concat([stream["frame"], df], ignore_index=True) if len(df) else stream["frame"]
        stream["frame"] = df
        if overwritten:  # a row sent again with other values: the last one counts
            df = df.drop_duplicates(["worker", "step"], keep="last")
        df = df.sort_values(["step", "worker"], kind="stable")
        df["elapsed"] = df["time"] - self._started
        if "staleness" in df:  # asynchronous runs: other updates applied during each step
            cols.append("staleness")
        cols += [c for c in df.columns if c not in cols and c != "replicas"]  # the run's metrics
        df = df[cols].reset_index(drop=True)
        self._history = (version, df)
        return df

    def anatomy(self, skip: int | None = None) -> pd.DataFrame:
        """Where each worker's wall time goes, as a DataFrame (one row per worker): mean
        ``step_time`` (s), the shares of it in ``input``, ``compute``, ``communication``,
        ``waiting`` and ``other`` (they sum to 1), ``bytes_per_step`` handed to the
        all-reduce, ``busy`` seconds per step (wall minus waiting) and ``straggler`` (busy
        more than 20% above the others'). ``workbench.common.anatomy`` says what each share
        includes and how it is measured. ``skip``: first steps left out (default: the first
        two calls, which trace). Grows while the run trains; empty for ``anatomy=False``."""
        from workbench.common import anatomy

        if skip is None:
            skip = 2 * self.job.steps_per_execution if self.job.steps > 4 * self.job.steps_per_execution else 0
        with self._lock:
            key = (self._version, None if self._links is None else self._links.count, skip)
        if self._anatomy[0] != key:  # the dashboard asks every second: rebuilt only when rows arrived
            self._anatomy = (key, anatomy.table(self.history, skip=skip))
        return self._anatomy[1].copy()

    def profile(self, steps: int = 10, timeout: float = 120) -> pd.DataFrame:
        """A TF profiler trace of ``steps`` steps on every training task of this live run,
        written under ``<run_dir>/profile/<n>/<task>`` (TensorBoard's profile plugin or XProf
        open it), summarised as a DataFrame, one row per task: the steps traced, and the
        seconds per step its op kernels spent in ``input``, ``compute`` and
        ``communication`` (``workbench.engine.profile`` classifies the ops; concurrent ops
        each count once). A parameter-server run is traced where its steps execute: its
        worker and PS engines' servers (``kernel/profiling.py``); its chief is not.

        TensorFlow's profiler itself can crash a task as the trace stops (a TF bug, about
        1 trace in 27 of a 2-worker MWMS run here): the run then fails with
        ``wb.ProfilerCrashed``, and ``run.resume()`` continues it."""
        import pandas as pd

        from workbench.common import validate

        steps = validate.positive_int("steps", steps)
        if self.done:
            raise RuntimeError(f"Run {self.id} has ended: profile() traces a live run")
        # a number no request of this run has used: a re-attached run's too, and an earlier
        # attempt's, whose events a resume from step 0 dropped but whose traces are on disk
        traced = [int(p.name) for p in RunDir(self.run_dir).profiles_dir.glob("*") if p.name.isdigit()]
        with self._lock:
            rid = self._profiles = 1 + max([self._profiles, *traced] + [e["id"] for e in self._events
                                                                        if e["kind"] == "profile"])
        if strategies.spec(self.job.strategy).has_ps:
            from workbench.kernel import profiling

            return profiling.servers(self, rid, steps, timeout)
        spe = self.job.steps_per_execution
        start = (self.step // spe + 2) * spe  # a call boundary ahead, the same for every worker
        RunDir(self.run_dir).request_profile(rid, start, -(-steps // spe) * spe)
        names = {t.name for t in self.tasks}
        deadline = time.monotonic() + timeout

        def got():
            with self._lock:
                return [e for e in self._events if e["kind"] == "profile" and e.get("id") == rid]

        while len(got()) < len(names) and not self.done and time.monotonic() < deadline:
            time.sleep(_POLL)
        rows = [{k: v for k, v in e.items() if k not in ("kind", "time", "id")} for e in got()]
        if len(rows) < len(names):
            if self._error is not None:
                raise self._error
            raise TimeoutError(f"profile(): {len(rows)} of {len(names)} tasks traced before "
                               f"{'the run ended' if self.done else f'{timeout} s'} (start step {start})")
        cols = ["task", "first", "last", "steps", "input", "compute", "communication", "ops", "logdir"]
        return pd.DataFrame(rows)[cols].sort_values("task").reset_index(drop=True)

    @property
    def links(self) -> Any:
        """The run's ``LinkWatch`` (``kernel/links.py``) when its tasks live on a test bed's
        hosts: the links' byte counters, sampled while it trains; otherwise None."""
        return self._links

    def _with_links(self, df, version):
        """Runs across test-bed hosts: per host, bytes sent/received per step and link
        utilisation (``link_tx_bytes_<host>``, ``link_rx_bytes_<host>``, ``link_util_<host>``)."""
        if self._links is None:
            return df
        key = (version, self._links.count)  # joined once per new row or link sample, not per call
        if self._joined[0] != key:
            self._joined = (key, self._links.join(df))
        return self._joined[1]

    @property
    def evaluations(self) -> pd.DataFrame:
        import pandas as pd

        rows = [{k: v for k, v in e.items() if k not in ("kind", "time")} for e in self._events if e["kind"] == "eval"]
        columns = ["step", "test_accuracy", "test_loss"]
        return pd.DataFrame(rows, columns=columns + sorted({k for r in rows for k in r} - set(columns)))

    @property
    def events(self) -> pd.DataFrame:
        """What happened besides steps, in order: checkpoints, evaluations, workers lost and
        replaced (with the step the run had reached), as a DataFrame."""
        import pandas as pd

        with self._lock:
            rows = [{k: v for k, v in e.items() if k not in ("tasks", "variables")}
                    for e in self._events if e["kind"] != "placement"]
        df = pd.DataFrame(rows)
        if df.empty:
            return pd.DataFrame(columns=["kind", "step", "time"])
        if "step" not in df:  # only events that name no step (a profile's: its first and last)
            df["step"] = None
        df = df.sort_values("time", kind="stable").reset_index(drop=True)
        return df[["kind", "step"] + [c for c in df.columns if c not in ("kind", "step")]]

    @property
    def placement(self) -> pd.DataFrame:
        """Every task (role, index, host, pid, devices) and every variable with its device,
        shape, bytes and ``kind``: "model", or "optimizer" for the optimizer's state (Adam's
        m and v, momentum, its step counter), which lives beside the variables it updates."""
        cached = self._stream().get("placement")
        if cached is not None and cached[0] == len(self._events):  # events only grow
            return cached[1].copy()
        count = len(self._events)
        df = self._placement_frame(count)
        self._stream()["placement"] = (count, df)
        return df.copy()

    def placement_rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``placement`` as (task rows, variable rows), lists of dicts with None for a missing
        value: what the dashboard draws 4 times a second, rebuilt only when a task reports."""
        from workbench.kernel import render

        count = len(self._events)
        cached = self._stream().get("placement_rows")
        if cached is None or cached[0] != count:
            cached = self._stream()["placement_rows"] = (count, render.placement_tables(self.placement))
        return cached[1]

    def _placement_frame(self, count):
        import pandas as pd

        cols = ["role", "task", "engine", "host", "pid", "device", "variable", "shape", "bytes", "kind"]
        rows, tasks = [], {}
        for ev in self._events[:count]:
            if ev["kind"] != "placement":
                continue
            for t in ev["tasks"]:  # a replaced worker: its latest engine
                tasks[(t.get("role"), t.get("task"))] = {
                    **{k: t.get(k) for k in ("role", "task", "engine", "host", "pid")},
                    "device": ", ".join(t.get("devices", []))}
            for v in ev["variables"]:
                role, task = _job_task(v["device"])
                rows.append({"role": role, "task": task, "device": v["device"], "variable": v["variable"],
                             "shape": v["shape"], "bytes": v["bytes"], "kind": v.get("kind", "model")})
        rank = {"chief": 0, "ps": 1, "worker": 2, "local": 3}
        df = pd.DataFrame(list(tasks.values()) + rows, columns=cols)
        # tasks report in any order: sort so the table reads the same every time
        # tasks, then model variables, then optimizer state
        df["_kind"] = df.variable.notna().astype(int) + (df.kind == "optimizer").astype(int)
        df["_rank"] = df.role.map(rank).fillna(9)
        df["_seq"] = range(len(df))
        df = df.sort_values(["_kind", "_rank", "task", "_seq"], kind="stable").drop(columns=["_kind", "_rank", "_seq"])
        return df.reset_index(drop=True).astype({"task": "Int64", "engine": "Int64", "pid": "Int64", "bytes": "Int64"})

    def checkpoint_steps(self) -> list[int]:
        """The steps of the checkpoints the run's chief saved (those a resume can start from), in order."""
        with self._lock:
            return [e["step"] for e in self._events if e["kind"] == "checkpoint"]

    @property
    def final_step(self) -> int:
        return max((r.get("final_step", 0) for r in self._outcome.values()), default=0)

    @property
    def evaluation(self) -> dict | None:
        for r in self._outcome.values():
            if r.get("evaluation"):
                return r["evaluation"]
        return None

    def weights(self) -> list:
        """The final model weights (from the chief) as a list of numpy arrays."""
        self.wait()
        for r in self._outcome.values():
            if r.get("weights") is not None:
                return r["weights"]
        raise RunStopped(f"Run {self.id} produced no weights")

    def resume(self, steps: int | None = None, **overrides: Any) -> "Run":
        """Start a new run that continues this one from its last checkpoint, in the same run
        directory, up to ``steps`` total steps (default: this run's target)."""
        if not self.done:
            raise RuntimeError(f"Run {self.id} is still running: stop() or wait() first")
        return self.cluster.launch(self.job, resume=True, steps=steps or self.job.steps, **overrides)

    def __repr__(self) -> str:
        state = "done" if self.done else "running"
        if self._error is not None:
            state = f"failed: {type(self._error).__name__}"
        return (f"<workbench.Run {self.id} {self.job.strategy} workers={self.job.workers} ps={self.job.ps} "
                f"{state}, step {self.step}/{self.job.steps}>")

    # -- watcher -----------------------------------------------------------------------
    def _stream(self) -> dict[str, Any]:
        """The rows in arrival order, each once, for readers that take only what is new
        (``history``, the dashboard): ``log``, and what has been read of it. Created on
        first use (recorded runs are built without ``__init__``)."""
        stream = self.__dict__.get("_stream_state")
        if stream is None:
            stream = self.__dict__["_stream_state"] = {
                "log": [], "built": 0, "frame": None, "overwritten": False, "published": {}, "workers": set(),
                "build": threading.Lock()}
        return stream

    def rows_since(self, cursor: int) -> tuple[list[StepRow], int]:
        """(rows that arrived after ``cursor``, the new cursor): the live dashboard's feed."""
        with self._lock:
            log = self._stream()["log"]
            return log[cursor:], len(log)

    def _merge(self, data: Published | Metrics | None, source: str | None = None) -> tuple[list, list]:
        """Merge published rows and events; returns those that are new (rows by the
        source's count, events by kind, step and time)."""
        if not data:
            return [], []
        data = dict(data)  # one consistent publish: ipyparallel updates this dict in place
        with self._lock:
            stream = self._stream()
            rows = data.get("rows", ())
            n = data.get("n")
            if source is not None and n is not None:
                # each publish carries a window of the newest rows, packed, and how many the
                # task has made: unpack and merge only those not merged yet
                packed = data.get("packed", ())
                seen = stream["published"].get(source, 0)
                if n < seen:  # a replacement engine started afresh
                    seen = 0
                rows = unpack(packed[max(0, len(packed) - (n - seen)):]) if n > seen else ()
                stream["published"][source] = n
            log, workers = stream["log"], stream["workers"]
            fresh = []
            for row in rows:
                key = (row["worker"], row["step"])
                old = self._rows.get(key)
                if old is None:
                    self._version += 1
                    if row["step"] > self._max_step:
                        self._max_step = row["step"]
                    log.append(row)
                    workers.add(row["worker"])
                elif old != row:
                    self._version += 1
                    stream["overwritten"] = True
                    log.append(row)
                self._rows[key] = row
            for ev in data.get("events", ()):
                key = _event_key(ev)
                if key not in self._seen_events:
                    self._seen_events.add(key)
                    self._events.append(ev)
                    fresh.append(ev)
        return list(rows), fresh

    def _take(self, name: str, ar: Any) -> None:
        """What task ``name`` has published so far: merged, and mirrored into the run
        directory when its host does not see it."""
        data = ar.data
        rows, events = self._merge(data, name)
        if self._mirror is not None:
            error = self._mirror.take(name, data, rows, events)
            if error is not None:  # a full disk here does not end the run: said once
                self.note("run_files_not_copied", error=error, step=self.step)

    def _watch(self):
        last_progress, last_step = time.monotonic(), -1
        try:
            while True:
                for name, ar in self._results.items():
                    self._take(name, ar)
                    if ar.ready() and name not in self._outcome:
                        self._collect(name, ar)
                if self._error is not None or len(self._outcome) == len(self._results):
                    break
                lost = self._engines.check()
                if lost is not None:
                    self._error = lost
                    break
                if self._tail is not None:
                    self._merge(self._tail())
                if self._mirror is not None and self._mirror.stop_to_forward():
                    self._request_stop()  # asked by the STOP file, which those hosts do not see
                step = self.step
                if step != last_step:
                    last_progress, last_step = time.monotonic(), step
                limit = self.start_timeout if step == 0 else self.stall_timeout
                if (self._stalls() or step == 0) and time.monotonic() - last_progress > limit:
                    # every run has a start timeout; only synchronous ones can stall later
                    self._error = RunStalled(self._stall_message(limit), role="worker") if self._stalls() \
                        else self._engines.start_timed_out(limit)
                    break
                time.sleep(_POLL)
        finally:
            if self._links is not None:
                self._links.sample()
                self._links.stop()
            self._engines.join()
            for name, ar in list(self._results.items()):  # a replacement that came up at the end
                if self._error is None and name not in self._outcome and ar.wait(5):
                    self._collect(name, ar)
            if self._error is not None:
                self._abort()
            if self.unshared_hosts:
                self._pull_files()
            self._finished = time.time()
            self._write_record()
            self._done.set()

    def _stalls(self):
        """Only synchronous multi-worker runs can hang silently; others error out."""
        return self._sync

    def _stall_message(self, limit):
        with self._lock:
            last = {}
            for (w, s) in self._rows:
                last[w] = max(last.get(w, 0), s)
        names = [t.name for t in self.tasks]
        behind = min(names, key=lambda n: last.get(n, 0))
        return (f"Run {self.id} made no progress for {limit:.0f} s (stall_timeout); the worker furthest "
                f"behind is {behind} (engine {self._engine_of(behind)}, last step {last.get(behind, 0)}); "
                f"last steps: {dict((n, last.get(n, 0)) for n in names)}. Its engines are being recycled.")

    def task_states(self) -> dict[str, str]:
        """``{task name: state}``, the one state model of a run's tasks:

        - "starting": its engine is alive, it has reported no step yet;
        - "running": it trains (its steps are in ``history``);
        - "serving": a PS task, or a parameter-server worker's TF server, holding variables
          or computing for the chief while the run goes on;
        - "done" / "stopped": it ended well, at the last step or at an agreed stop;
        - "failed": it raised (the run's error says how);
        - "lost": its engine died while the run needed it;
        - "replaced": a replacement engine took its task over (``events`` say when);
        - "recycled": the run succeeded and the cluster later restarted its engine for
          another topology, on purpose.
        Red is for "failed" and "lost" only."""
        client = self.cluster.client if self.cluster is not None else None
        alive = set(client.ids) if client is not None else set()
        replaced = {e.get("task") for e in self._events if e["kind"] == "worker_replaced"}
        with self._lock:
            reporting = set(self._stream()["workers"]) if not self.done else set()
        if reporting:  # a parameter-server chief reports its workers' steps under their names
            reporting |= {t.name for t in self.tasks if t.role == "chief"}
        failed = getattr(self._error, "task", None), getattr(self._error, "role", None)
        states = {}
        for t in self.tasks:
            name, out = t.name, self._outcome.get(t.name)
            if out is not None and "server" in out and not self.done:
                state = "serving"
            elif out is not None:
                state = "stopped" if out.get("stopped") or (self.stopped and "server" in out) else "done"
                if t.engine_id not in alive and self._error is None:
                    state = "recycled"
            elif not self.done:
                state = ("lost" if t.engine_id not in alive else
                         "running" if name in reporting else "replaced" if name in replaced else "starting")
            elif (t.index, t.role) == failed:
                state = "lost" if t.engine_id not in alive else "failed"
            else:
                state = "lost" if t.engine_id not in alive and self._error is not None else "stopped"
            states[name] = state
        return states

    def _task(self, name):
        return next((t for t in self.tasks if t.name == name), None)

    def _engine_of(self, name):
        task = self._task(name)
        return task.engine_id if task else None

    def _collect(self, name: str, ar: Any) -> None:
        if self._mirror is not None and name in self._mirror.names and ar.successful():
            ar.wait_for_output(5)  # its last publishes (the final checkpoint) may come after its result
            self._take(name, ar)
        try:
            result = ar.get()
        except Exception as e:
            task = self._task(name)
            if not self.cluster.pool.alive(task.engine_id):  # ipyparallel: "Engine N died while ..."
                self._error = self._engines.lost(task)
                return
            peer = self._engines.lost_peer(task) if self._sync else None
            if peer is not None:  # a lockstep peer's loss made this task fail: name the lost one
                self._error = self._engines.lost(peer)
                return
            ename = getattr(e, "ename", type(e).__name__)
            evalue = getattr(e, "evalue", str(e))
            tb = _ANSI.sub("", getattr(e, "traceback", None) or str(e))
            self._error = EngineError(
                f"{name} (engine {task.engine_id}) failed: {ename}: {evalue}\n\n--- engine traceback ---\n{tb}",
                role=task.role, task=task.index, engine_id=task.engine_id, remote_traceback=tb)
            return
        self._outcome[name] = result
        merged: Metrics = {"rows": result.get("rows", []), "events": result.get("events", [])}
        self._merge(merged)

    def note(self, kind: EventKind, **info: Any) -> None:
        """Record an event the kernel observed (a worker lost, a replacement started, a
        fault injected on a test bed): a ``TaskEvent`` or a ``FaultEvent``."""
        event = cast(Event, dict(info, kind=kind, time=time.time()))  # the keys ``kind``'s protocol names
        with self._lock:
            self._events.append(event)
            self._seen_events.add(_event_key(event))  # read back from its file (a re-attached run's tail): once
        try:  # with the run's own events, for wb.load and the next kernel
            RunDir(self.run_dir).append_kernel_event(event)
        except (OSError, TypeError, ValueError):  # a full disk, a value JSON cannot hold: kept in memory only
            pass

    def swap_task(self, old: Any, new: Any, ar: Any) -> None:
        """A replacement engine took over ``old``'s task; its result is collected afresh."""
        name = old.name
        with self._lock:
            self.tasks = [new if t is old else t for t in self.tasks]
            self._results[name] = ar
            self._outcome.pop(name, None)
            self._stream()["published"].pop(name, None)  # the replacement counts its rows from 0

    def _abort(self):
        """After a failure: stop every task. Synchronous peers blocked in a collective never
        return, so engines still busy after a grace period are killed (local ones, by PID)
        and replaced on the next use of the cluster."""
        self._request_stop()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not all(ar.ready() for ar in self._results.values()):
            time.sleep(_POLL)
        busy = [t.engine_id for t, ar in zip(self.tasks, self._results.values()) if not ar.ready()]
        self.cluster.pool.condemn([t.engine_id for t in self.tasks], kill=busy)

    def _pull_files(self):
        """Copy what the tasks on hosts without the run directory wrote there (metrics files;
        the chief's checkpoints, TensorBoard logs, profiles) into it, from engines that ended
        their task and are still there."""
        from workbench.kernel import remote

        pool = self.cluster.pool
        tasks = [t for t in self.tasks if t.host in self.unshared_hosts and self._results[t.name].ready()
                 and pool.alive(t.engine_id)]
        if tasks:
            try:
                remote.pull_run_files(self.cluster.client, tasks, str(self.run_dir), self._chief, timeout=60)
            except Exception as e:  # noqa: BLE001 - the run's end is recorded whatever happens here
                self.note("run_files_not_copied", error=f"{type(e).__name__}: {e}", step=self.step)

    def abandon(self) -> None:
        """The cluster is stopping under this run: it ends as stopped by the cluster."""
        if not self._done.is_set():
            self._error = self._error or RunStopped(f"Run {self.id}: the cluster was stopped")

    def _write_record(self):
        record: ResultRecord = {
            "final_step": self.final_step, "finished": self._finished,
            "error": None if self._error is None else str(self._error).splitlines()[0],
            "stopped": self.stopped,
            "evaluation": self.evaluation,
        }
        run_dir = RunDir(self.run_dir)
        try:
            for r in self._outcome.values():  # the final weights, for kernels that load the run later
                if r.get("weights") is not None:
                    run_dir.write_weights(r["weights"])
            run_dir.write_result(record)
        except OSError:
            pass


def _event_key(ev: Event) -> tuple[Any, ...]:
    """What makes an event the same event when it arrives again (every publish repeats the
    last events; files repeat what was published): kind, step, time and whose it is. Two
    MWMS workers publish their placement at the same microsecond when the collective that
    builds their variables releases them together: without the tasks in the key one of
    them was dropped (seen once in a Slurm run's placement, one task of two)."""
    tasks = tuple((t.get("role"), t.get("task")) for t in ev.get("tasks", ()) or ())
    return ev["kind"], ev.get("step"), ev["time"], tasks, ev.get("worker"), ev.get("task")
