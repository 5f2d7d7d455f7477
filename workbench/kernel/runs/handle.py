"""``Run``: the kernel's handle on one training run that executes on engines.

A run is three things, each its own object: this handle (what the user calls), the run's
log (``runs/log.py``: its rows and events, and the tables built from them) and, while it
trains, its watcher (``runs/watcher.py``: the thread that follows the engines). A
``RecordedRun`` (``runs/recorded.py``) has the same read side over a log read from the run
directory; ``BaseRun`` is what both share.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from workbench.common import strategies
from workbench.common.protocols import EventKind, Metrics, StepRow
from workbench.errors import RunStateError, RunStopped, RunTimeout, invalid
from workbench.kernel.runs.log import RunLog
from workbench.kernel.runs.watcher import Watcher
from workbench.store import RunDir

if TYPE_CHECKING:
    import pandas as pd

    from workbench.kernel.engines.stacks import Console, Stacks
    from workbench.common.explanation import Explanation
    from workbench.kernel.views.dashboard import Dashboard

_POLL = 0.05

# Functions that may watch a new live run from outside the run's room (``observe``): a test
# bed's ``links.watch`` samples the links of runs on its hosts.
_OBSERVERS: list[Callable[["Run"], Any]] = []


def observe(observer: Callable[["Run"], Any]) -> None:
    """Call ``observer(run)`` for every live run started from now on; a run keeps the first
    non-None answer as its ``links`` (``testbed/links.py``'s ``LinkWatch``: link bytes
    joined into ``history``, sampled until the run ends). Registered once per observer."""
    if observer not in _OBSERVERS:
        _OBSERVERS.append(observer)


class BaseRun:
    """What a live ``Run`` and a ``RecordedRun`` share: the job, its tasks, its run
    directory and its log, and the tables read from the log."""

    def __init__(self, job: Any, tasks: list, log: RunLog) -> None:
        self.job = job
        self.tasks = tasks
        self.run_dir = Path(job.run_dir)
        self.log = log

    @property
    def id(self) -> str:
        """The run's id: its run directory's name, the same for every attempt (a resume)."""
        return self.job.run_id

    @property
    def attempt(self) -> int:
        """0 for a run's first launch, 1 for its first resume, and so on."""
        return getattr(self.job, "attempt", 0)

    @property
    def started(self) -> float:
        """When the run started (``time.time()``): ``elapsed`` in ``history`` counts from it."""
        return self.log.started

    @property
    def step(self) -> int:
        """The highest step any worker has reported."""
        return self.log.step

    @property
    def links(self) -> Any:
        """The run's ``LinkWatch`` (``testbed/links.py``) when its tasks live on a test bed's
        hosts: the links' byte counters, sampled while it trains; otherwise None."""
        return self.log.links

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
        return self.log.history

    def anatomy(self, skip: int | None = None) -> pd.DataFrame:
        """Where each worker's wall time goes, as a DataFrame (one row per worker): mean
        ``step_time`` (s), the shares of it in ``input``, ``compute``, ``communication``,
        ``waiting`` and ``other`` (they sum to 1), ``bytes_per_step`` handed to the
        all-reduce, ``busy`` seconds per step (wall minus waiting) and ``straggler`` (busy
        more than 20% above the others'). ``workbench.common.anatomy`` says what each share
        includes and how it is measured. ``skip``: first steps left out (default: the first
        two calls of the run's newest attempt, which trace); empty until a step past them has
        come. Grows while the run trains; empty for ``anatomy=False``."""
        return self.log.anatomy(self.job.steps, skip, self.job.first_step)

    @property
    def evaluations(self) -> pd.DataFrame:
        """Every evaluation the run made (step and test metrics), in order."""
        return self.log.evaluations

    @property
    def events(self) -> pd.DataFrame:
        """What happened besides steps, in order: checkpoints, evaluations, workers lost and
        replaced (with the step the run had reached), as a DataFrame."""
        return self.log.events

    @property
    def placement(self) -> pd.DataFrame:
        """Every task (role, index, host, pid, devices) and every variable with its device,
        shape, bytes and ``kind``: "model", or "optimizer" for the optimizer's state (Adam's
        m and v, momentum, its step counter), which lives beside the variables it updates."""
        return self.log.placement

    def checkpoint_steps(self) -> list[int]:
        """The steps of the checkpoints the run's chief saved (those a resume can start from), in order."""
        return self.log.checkpoint_steps()

    def logs(self, task: str | None = None, since: float | None = None, last: int | None = None) -> pd.DataFrame:
        """Every task's stdout and stderr, TensorFlow's C++ log included, a row per line in
        time order: ``time``, ``elapsed`` (seconds since the run started, as in ``history``),
        ``step`` (the highest step reported by then), ``task``, ``stream`` ("out", "err"),
        ``line``. The notices TensorFlow prints at every start are folded into one line per
        task; ``<run dir>/logs/<task>.log`` keeps every line. ``task``: one task's lines
        ("worker:1"); ``since``: only the lines after that many seconds; ``last``: only the
        newest that many. Grows while the run trains (a live run keeps its last
        ``common.logs.KEEP`` lines here)."""
        from workbench.common import validate

        names = [t.name for t in self.tasks]
        if task is not None and task not in names:
            raise invalid("task", task, f"one of the run's tasks: {', '.join(names)}")
        if since is not None:
            since = validate.finite_float("since", since)
        if last is not None:
            last = validate.positive_int("last", last, minimum=0)
        return self.log.lines.frame(self.started, self.history, str(RunDir(self.run_dir).logs_dir), task, since,
                                    last)

    def rows_since(self, cursor: int) -> tuple[list[StepRow], int]:
        """(rows that arrived after ``cursor``, the new cursor): the live dashboard's feed."""
        return self.log.rows_since(cursor)

    def explain(self) -> Explanation:
        """What the cost model (``common/costmodel.py``) predicts for this run beside what it
        measured: steps/s, step time and its parts, bytes per step on each host's link and
        its use, each PS task's load, each with predicted, measured and their ratio, and one
        sentence naming the bottleneck (``runs/explain.py``). A table in a notebook;
        ``.table`` is the DataFrame. For any run that measured its anatomy, live or recorded."""
        from workbench.kernel.runs import explain

        return explain.explain(self)

    def note(self, kind: EventKind, **info: Any) -> None:
        """Record an event the kernel observed (a worker lost, a replacement started, a
        fault injected on a test bed): a ``TaskEvent`` or a ``FaultEvent``, kept with the run's
        own events in its directory (``metrics/kernel.jsonl``) for ``wb.load`` and the next kernel."""
        event = self.log.note(kind, **info)
        try:
            RunDir(self.run_dir).append_kernel_event(event)
        except (OSError, TypeError, ValueError):  # a full disk, a value JSON cannot hold: kept in memory only
            pass


class Run(BaseRun):
    """A training run on a cluster's engines (``Cluster.train`` returns one).

    ``started``: when it started (default: now; a re-attached run's own start time);
    ``tail``: a re-attached run's reader of the rows its engines published before this
    kernel watched it (returns ``{"rows": [...], "events": [...]}`` of what is new);
    ``unshared``: hosts whose engines do not see the run directory."""

    def __init__(self, cluster: Any, job: Any, tasks: list, results: dict, stall_timeout: float,
                 start_timeout: float, *, started: float | None = None,
                 tail: Callable[[], Metrics] | None = None, unshared: Iterable[str] = ()) -> None:
        super().__init__(job, tasks, RunLog(started or time.time(), job.steps_per_execution))
        self.cluster = cluster
        self.stall_timeout = stall_timeout
        self.start_timeout = start_timeout
        self.unshared_hosts = sorted(unshared)
        self._dashboard, self._profiles = None, 0  # profiles: requests made (each one's traces: profile/<n>)
        # made before a link watch, whose thread asks it ``done`` (once before it existed: run 36)
        self.watcher = Watcher(self, results, stall_timeout, start_timeout, tail=tail, unshared=self.unshared_hosts)
        self.log.links = next((w for observer in list(_OBSERVERS) if (w := observer(self)) is not None), None)
        self.watcher.start()

    # -- public ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.watcher.done.is_set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the run's watcher has recorded its end (at most ``timeout`` s); True
        if it has. Unlike ``wait`` it raises nothing and leaves the cluster alone."""
        return self.watcher.done.wait(timeout)

    @property
    def failure(self) -> BaseException | None:
        """The error the run ended with (what ``wait()`` raises), or None."""
        return self.watcher.error

    @property
    def outcome(self) -> dict[str, Any]:
        """{task name: what the task returned}, for the tasks that have ended."""
        return self.watcher.outcome

    @property
    def results(self) -> dict[str, Any]:
        """{task name: its ipyparallel ``AsyncResult``}."""
        return self.watcher.results

    def wait(self, timeout: float | None = None) -> "Run":
        """Block until the run ends; raise the engines' error (with role and traceback) if any.
        In a notebook, the first cell that waits for a run whose dashboard was shown ends
        with the run's final static rendering (``Dashboard.finish``)."""
        if not self._block(timeout):
            raise RunTimeout(f"Run {self.id} still running after {timeout} s (step {self.step}/{self.job.steps})")
        if self._dashboard is not None:  # this cell ends with the run's final rendering
            self._dashboard.finish()
        if self.failure is None:
            self.cluster.pool.heal()
            return self
        try:  # engines the failure left unusable are replaced now, where their host answers
            self.cluster.pool.heal(reachable_only=True)
        except Exception as e:  # noqa: BLE001 - the run's own error is what wait() reports
            self.note("engines_not_replaced", error=f"{type(e).__name__}: {e}", step=self.step)
        raise self.failure

    def dashboard(self, interval: float = 0.25, baseline: Any = None) -> Dashboard:
        """The live dashboard widget (shown by default when a run starts in a notebook).

        ``baseline``: a finished single-worker ``Run`` (or its examples/s) to show scaling
        efficiency = total throughput / (workers x baseline)."""
        from workbench.kernel.views.dashboard import Dashboard  # the sanctioned arrow up (tests/test_import.py)

        if self._dashboard is None or baseline is not None:
            self._dashboard = Dashboard(self, interval=interval, baseline=baseline)
        return self._dashboard

    def _block(self, timeout):
        """Wait for the end of the run. Interrupting the kernel (Ctrl-C, or the notebook's
        stop button) while waiting stops the run cleanly, keeping a checkpoint, then lets
        the interrupt through: a kernel busy in a cell cannot handle widget clicks, so the
        dashboard's Stop button works while the kernel is free, and an interrupt while not."""
        try:
            return self.join(timeout)
        except KeyboardInterrupt:
            self.stop_interrupted()
            raise

    def stop_interrupted(self, timeout: float = 60) -> "Run":
        """What interrupting the kernel that waits on this run does (``wait()`` in a
        notebook; Ctrl-C in ``python -m workbench train``): every task stops at its next
        agreed step and saves a checkpoint, said as it happens."""
        print(f"Interrupted: stopping run {self.id} at its next agreed step...", flush=True)
        self.watcher.request_stop()
        if self.join(timeout):
            print(f"Run {self.id} stopped at step {self.final_step}; its last checkpoint is in {self.run_dir}.")
        else:
            print(f"Run {self.id} still running {timeout:g} s after the request to stop (step {self.step}).")
        return self

    def stop(self, timeout: float = 60) -> "Run":
        """Ask every task to stop at its next agreed step, save a checkpoint, and wait."""
        self.watcher.request_stop()
        self.join(timeout)
        self.cluster.pool.heal()
        return self

    @property
    def stopped(self) -> bool:
        return any(r.get("stopped") for r in self.outcome.values())

    @property
    def status(self) -> str:
        """running, finished, stopped or failed (as ``wb.runs()`` and ``wb.load`` say it)."""
        if not self.done:
            return "running"
        return "failed" if self.failure is not None else "stopped" if self.stopped else "finished"

    @property
    def error(self) -> str | None:
        """The first line of the error the run ended with, or None."""
        return None if self.failure is None else str(self.failure).splitlines()[0]

    def profile(self, steps: int = 10, timeout: float = 120) -> pd.DataFrame:
        """A TF profiler trace of ``steps`` steps on every training task of this live run,
        written under ``<run_dir>/profile/<n>/<task>`` (TensorBoard's profile plugin or XProf
        open it), summarised as a DataFrame, one row per task: the steps traced, and the
        seconds per step its op kernels spent in ``input``, ``compute`` and
        ``communication`` (``workbench.engine.profile`` classifies the ops; concurrent ops
        each count once). A parameter-server run is traced where its steps execute: its
        worker and PS engines' servers (``runs/profiling.py``); its chief is not.

        TensorFlow's profiler itself can crash a task as the trace stops (a TF bug, about
        1 trace in 27 of a 2-worker MWMS run here): the run then fails with
        ``wb.ProfilerCrashed``, and ``run.resume()`` continues it."""
        import pandas as pd

        from workbench.common import validate

        steps = validate.positive_int("steps", steps)
        if self.done:
            raise RunStateError(f"Run {self.id} has ended: profile() traces a live run")
        if strategies.spec(self.job.strategy).splits_model:  # steps counted on the chief, run on the workers
            raise RunStateError(f"Run {self.id} splits its model across its workers: profile() cannot trace its "
                                "steps where they are counted; read its anatomy (run.anatomy()) instead")
        # a number no request of this run has used: a re-attached run's too, and an earlier
        # attempt's, whose events a resume from step 0 dropped but whose traces are on disk
        traced = [int(p.name) for p in RunDir(self.run_dir).profiles_dir.glob("*") if p.name.isdigit()]
        rid = self._profiles = 1 + max([self._profiles, *traced] + [e["id"] for e in self.log.events_of("profile")])
        if strategies.spec(self.job.strategy).has_ps:
            from workbench.kernel.runs import profiling

            return profiling.servers(self, rid, steps, timeout)
        spe = self.job.steps_per_execution
        start = (self.step // spe + 2) * spe  # a call boundary ahead, the same for every worker
        RunDir(self.run_dir).request_profile(rid, start, -(-steps // spe) * spe)
        names = {t.name for t in self.tasks}
        deadline = time.monotonic() + timeout

        def got():
            return [e for e in self.log.events_of("profile") if e.get("id") == rid]

        while len(got()) < len(names) and not self.done and time.monotonic() < deadline:
            time.sleep(_POLL)
        rows = [{k: v for k, v in e.items() if k not in ("kind", "time", "id")} for e in got()]
        if len(rows) < len(names):
            if self.failure is not None:
                raise self.failure
            raise RunTimeout(f"profile(): {len(rows)} of {len(names)} tasks traced before "
                               f"{'the run ended' if self.done else f'{timeout} s'} (start step {start})")
        cols = ["task", "first", "last", "steps", "input", "compute", "communication", "ops", "logdir"]
        return pd.DataFrame(rows)[cols].sort_values("task").reset_index(drop=True)

    def stacks(self, timeout: float = 2.0) -> Stacks:
        """Every task's Python stacks, all threads, read now while the run trains (each
        engine's debug thread; a stopped local process by py-spy): ``{task: text}``, with
        ``.table`` saying where each task is (in the user's code, inside TensorFlow and the
        op it executes, stopped, unreachable). ``kernel/engines/stacks.py`` says how."""
        from workbench.kernel.engines import stacks

        return stacks.Stacks(stacks.read(self.cluster.pool, list(self.tasks), timeout))

    def console(self, task: str) -> Console:
        """A Python console inside task ``task``'s engine ("worker:1") while it trains:
        ``run.console("worker:1")("step.numpy()")``; its ``model``, ``optimizer``, ``step``,
        ``strategy``, ``job`` and ``task`` are names there (``%%wb on worker:1`` in a cell)."""
        from workbench.errors import invalid
        from workbench.kernel.engines import stacks

        names = [t.name for t in self.tasks]
        if task not in names:
            raise invalid("task", task, f"one of this run's tasks: {', '.join(names)}")
        return stacks.Console(self.cluster.pool, next(t for t in self.tasks if t.name == task))

    @property
    def final_step(self) -> int:
        return max((r.get("final_step", 0) for r in self.outcome.values()), default=0)

    @property
    def evaluation(self) -> dict | None:
        for r in self.outcome.values():
            if r.get("evaluation"):
                return r["evaluation"]
        return None

    def weights(self) -> list:
        """The final model weights (from the chief) as a list of numpy arrays."""
        self.wait()
        for r in self.outcome.values():
            if r.get("weights") is not None:
                return r["weights"]
        raise RunStopped(f"Run {self.id} produced no weights")

    def resume(self, steps: int | None = None, **overrides: Any) -> "Run":
        """Start a new run that continues this one from its last checkpoint, in the same run
        directory, up to ``steps`` total steps (default: this run's target)."""
        if not self.done:
            raise RunStateError(f"Run {self.id} is still running: stop() or wait() first")
        return self.cluster.launch(self.job, resume=True, steps=steps or self.job.steps, **overrides)

    def __repr__(self) -> str:
        state = "done" if self.done else "running"
        if self.failure is not None:
            state = f"failed: {type(self.failure).__name__}"
        return (f"<workbench.Run {self.id} {self.job.strategy} workers={self.job.workers} ps={self.job.ps} "
                f"{state}, step {self.step}/{self.job.steps}>")

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
        client = self.cluster.client
        alive = set(client.ids) if client is not None else set()
        replaced = {e.get("task") for e in self.log.events_of("worker_replaced")}
        reporting = self.log.reporting() if not self.done else set()
        if reporting:  # a parameter-server chief reports its workers' steps under their names
            reporting |= {t.name for t in self.tasks if t.role == "chief"}
        failed = getattr(self.failure, "task", None), getattr(self.failure, "role", None)
        states = {}
        for t in self.tasks:
            name, out = t.name, self.outcome.get(t.name)
            if out is not None and "server" in out and not self.done:
                state = "serving"
            elif out is not None:
                state = "stopped" if out.get("stopped") or (self.stopped and "server" in out) else "done"
                if t.engine_id not in alive and self.failure is None:
                    state = "recycled"
            elif not self.done:
                state = ("lost" if t.engine_id not in alive else
                         "running" if name in reporting else "replaced" if name in replaced else "starting")
            elif (t.index, t.role) == failed:
                state = "lost" if t.engine_id not in alive else "failed"
            else:
                state = "lost" if t.engine_id not in alive and self.failure is not None else "stopped"
            states[name] = state
        return states

    def swap_task(self, old: Any, new: Any, ar: Any) -> None:
        """A replacement engine took over ``old``'s task; its result is collected afresh."""
        self.tasks = [new if t is old else t for t in self.tasks]
        self.watcher.swap(old.name, ar)

    def abandon(self) -> None:
        """The cluster is stopping under this run: it ends as stopped by the cluster."""
        self.watcher.abandon()
