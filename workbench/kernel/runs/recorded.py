"""``wb.load(run_id)``: a ``Run`` read back from its run directory, in any kernel.

A run outlives the kernel that started it: its run directory holds what it was asked to
do (``run.json``, ``job.pkl``), every step and event (``metrics/*.jsonl``), its
checkpoints, and how it ended (``result.json``, ``weights.npz``). ``RecordedRun`` has the
same read side as a live ``Run`` (``history``, ``events``, ``placement``, ``evaluation``,
``weights()``, ``dashboard()``) built from those files; ``Cluster.resume`` continues it.
"""

import difflib
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NoReturn

from workbench.common.linksamples import LinkSamples
from workbench.errors import RunStopped, RunTimeout, invalid
from workbench.kernel.engines import live
from workbench.kernel.runs.handle import BaseRun, Run
from workbench.kernel.runs.log import RunLog
from workbench.store import Home, Records, RunDir

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from workbench.common.job import Job


def resolve(run_id: "str | os.PathLike | BaseRun", home: str | os.PathLike | None = None) -> Path:
    """The run directory of ``run_id``: a run id, a unique prefix of one, or a directory."""
    if isinstance(run_id, BaseRun):
        return Path(run_id.run_dir)
    if not isinstance(run_id, (str, Path)) or not str(run_id):
        raise invalid("run_id", run_id, "a run id (a str, as wb.runs() lists them) or a unique prefix of one")
    given = Path(run_id)
    if given.is_dir() and RunDir(given).exists():
        return given
    store = Home(home)
    runs_dir = store.runs_dir
    ids = [d.run_id for d in store.run_dirs()]
    run_id = str(run_id)
    if run_id in ids:
        return runs_dir / run_id
    matches = [i for i in ids if i.startswith(run_id)]
    if len(matches) == 1:
        return runs_dir / matches[0]
    if matches:
        raise invalid("run_id", run_id, f"a prefix of exactly one run id; it starts {len(matches)}: "
                      f"{', '.join(matches[:5])}{', ...' if len(matches) > 5 else ''}")
    close = difflib.get_close_matches(run_id, ids, n=3, cutoff=0.5) or ids[:3]
    raise invalid("run_id", run_id, f"the id (or a unique prefix) of a run recorded in {runs_dir}; "
                  + (f"the closest are: {', '.join(close)}" if close else "there is none yet"))


def load(run_id: "str | os.PathLike | BaseRun", home: str | os.PathLike | None = None) -> BaseRun:
    """The run ``run_id`` (a unique prefix is enough), read back from its run directory:
    status, ``history``, ``events``, ``placement``, ``evaluation``, ``weights()``,
    ``dashboard()``. Works for running, finished, stopped, failed and lost runs, whichever
    kernel started them. A run still training on a cluster this kernel has attached to
    (``wb.Cluster(profile=...)``) comes back live: its dashboard updates and ``stop()`` works."""
    run_dir = resolve(run_id, home)
    found = find_live(run_dir)
    return found if found is not None else RecordedRun(run_dir)


def find_live(run_dir: str | Path) -> Run | None:
    """The live ``Run`` of ``run_dir``: one this kernel is watching already, or one still
    training on an attached cluster (``wb.Cluster(profile=...)``) whose kernel went away.
    Engines of such a cluster outlive kernels, and ipyparallel's hub keeps every task's
    result: the run is watched again through its tasks' message ids (``run.json``), its rows
    read back from its metrics files. None when there is no such run."""
    run_dir = Path(run_dir).resolve()
    for cluster in live.clusters():
        for run in reversed(cluster.runs):
            if Path(run.run_dir).resolve() == run_dir:
                return run
    started = RunDir(run_dir).read_run() or {}
    msg_ids = started.get("msg_ids")
    if not msg_ids or started.get("profile") is None or RunDir(run_dir).ended():
        return None
    for cluster in live.clusters():
        if cluster.attached and cluster.running and cluster.profile == started["profile"] and _known(cluster, msg_ids):
            return _reattach(cluster, run_dir, started, msg_ids)
    return None


def _known(cluster, msg_ids):
    """Does this cluster's hub know the run's tasks (pending or done)?"""
    try:
        status = cluster.client.result_status(list(msg_ids.values()), status_only=True)
    except Exception:  # unknown message ids: another cluster in the same profile
        return False
    return len(status.get("pending", ())) + len(status.get("completed", ())) == len(msg_ids)


def _reattach(cluster: Any, run_dir: Path, started: dict, msg_ids: dict[str, str]) -> Run:
    import cloudpickle

    job = cloudpickle.loads(RunDir(run_dir).read_job())
    pids = {(t["role"], t["index"]): t.get("pid") for t in started.get("tasks", [])}
    # the run's engines, busy when this kernel attached, join the inventory
    cluster.pool.adopt(job.tasks, pids)
    # the run's watcher thread polls the hub: on a client of its own (clients are not thread-safe)
    watcher = cluster.new_client()
    if started.get("session"):  # a client drops IOPub messages of other sessions: the tasks' publishes
        watcher.session.session = started["session"]  # (rows, checkpoints for hosts without the run dir)
    results = {t.name: watcher.get_result(msg_ids[t.name], block=False) for t in job.tasks}
    offsets = {}
    # hosts without the run directory: this kernel now keeps its copy current and forwards a STOP file
    run = Run(cluster, job, job.tasks, results, stall_timeout=60.0, start_timeout=180.0,
              started=started.get("started"), tail=lambda: RunDir(run_dir).read_metrics(offsets),
              unshared=job.unshared_hosts)
    cluster.runs.append(run)
    # this kernel watches it now: the records (wb.runs(), the panel, the CLI's stop) say running again
    started.update(kernel_pid=os.getpid(), notebook=os.environ.get("JPY_SESSION_NAME"))
    RunDir(run_dir).write_run(started)

    def close():
        run.join()
        watcher.close()

    threading.Thread(target=close, name=f"workbench-reattached-{run.id}", daemon=True).start()
    return run


class RecordedRun(BaseRun):
    """A run read from its files. It is not watched: ``refresh()`` reads what was written since."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        run_dir = Path(run_dir)
        started = RunDir(run_dir).read_run() or {}
        job = SimpleNamespace(
            run_id=run_dir.name, run_dir=str(run_dir), strategy=started.get("strategy"),
            workers=started.get("workers"), ps=started.get("ps"), steps=started.get("steps"),
            global_batch_size=started.get("global_batch_size"), devices=started.get("devices", 0),
            steps_per_execution=started.get("steps_per_execution") or 1, attempt=started.get("attempt", 0),
            compression=started.get("compression"), average_every=started.get("average_every", 1),
            bytes_per_pack=started.get("bytes_per_pack", 0), gradient_delay=started.get("gradient_delay", 0),
            first_step=started.get("first_step", 1))
        tasks = [SimpleNamespace(name=f"{t['role']}:{t['index']}", role=t["role"], index=t["index"],
                                 engine_id=t.get("engine"), host=t.get("host")) for t in started.get("tasks", [])]
        super().__init__(job, tasks, RunLog(started.get("started") or 0.0, job.steps_per_execution))
        self._book = Records(run_dir.parent.parent)
        self._offsets: dict[str, int] = {}
        self._log_offsets: dict[str, int] = {}
        self._record: dict = {}
        self._result: dict = {}
        self.refresh()

    def refresh(self) -> "RecordedRun":
        """Read the rows, events and outcome written since the last read."""
        self.log.merge(RunDir(self.run_dir).read_metrics(self._offsets))
        self.log.links = _links(self.run_dir, self.log.links)  # a run on a test bed: its links' samples
        first = self.log.first_time()
        if first is not None:  # a resumed run's run.json says when the last attempt started
            self.log.started = min(self.log.started or float("inf"), first)
        self._record = self._book.run(self.run_dir) or {}
        self._result = RunDir(self.run_dir).read_result() or {}
        return self

    # -- what the files say ---------------------------------------------------------------
    @property
    def status(self) -> str:
        """running, finished, stopped, failed or lost (its kernel died before the run ended)."""
        return self._record.get("status", "lost")

    @property
    def error(self) -> str | None:
        """The first line of the error the run ended with, or None."""
        return self._result.get("error")

    @property
    def done(self) -> bool:
        return self.status != "running"

    @property
    def final_step(self) -> int:
        return self._result.get("final_step") or self.step

    @property
    def stopped(self) -> bool:
        return bool(self._result.get("stopped"))

    @property
    def evaluation(self) -> dict | None:
        return self._result.get("evaluation")

    @property
    def checkpoint(self) -> int | None:
        """The step of the last checkpoint (where a resume starts), or None."""
        return RunDir(self.run_dir).checkpoint_step()

    def weights(self) -> "list[np.ndarray]":
        """The final weights as numpy arrays: those the run ended with (``weights.npz``), or
        for a run that ended without them (lost, failed) the model of its last checkpoint,
        read by a short TensorFlow subprocess (this kernel does not import TensorFlow)."""
        final = RunDir(self.run_dir).read_weights()
        if final is not None:
            return final
        if self.checkpoint is None:
            raise RunStopped(f"Run {self.id} produced no weights and saved no checkpoint")
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "weights.npz"
            out = subprocess.run([sys.executable, "-m", "workbench.engine.weights", str(self.run_dir), str(path)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise RunStopped(f"Run {self.id}: could not read its checkpoint at step {self.checkpoint}:\n"
                                 f"{out.stderr[-2000:]}")
            return _read_weights(path)

    def logs(self, task: str | None = None, since: float | None = None, last: int | None = None) -> "pd.DataFrame":
        """``Run.logs``, read from the run's log files."""
        self.refresh().refresh_logs()
        return super().logs(task, since, last)

    def refresh_logs(self) -> "RecordedRun":
        """Read the log lines written since the last read (into ``log.lines``; not done by
        ``refresh``: a run's logs may be long, and are read when asked for)."""
        for name, lines in RunDir(self.run_dir).read_logs(self._log_offsets).items():
            self.log.lines.extend(name, lines)
        return self

    def wait(self, timeout: float | None = None) -> "RecordedRun":
        """A recorded run is watched by the kernel that started it: wait for its
        ``result.json`` (polling its files), and raise its error."""
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while self.refresh().status == "running":
            if end is not None and time.monotonic() > end:
                raise RunTimeout(f"Run {self.id} still running after {timeout} s (step {self.step}/{self.job.steps})")
            time.sleep(0.2)
        if self.status == "failed":
            raise RunStopped(f"Run {self.id} failed: {self.error}")
        return self

    def stop(self, timeout: float = 60) -> "RecordedRun":
        """Ask every task to stop at its next agreed step (saving a checkpoint), and wait
        for the kernel watching the run to record its end."""
        import time

        if self.status == "running":
            RunDir(self.run_dir).request_stop()
            end = time.monotonic() + timeout
            while self.refresh().status == "running" and time.monotonic() < end:
                time.sleep(0.2)
        return self

    def dashboard(self, interval: float = 0.25, baseline: Any = None) -> "_Html":
        """The static rendering of the run (charts, placement), as a saved notebook shows it."""
        from workbench.kernel.views.render import final_bundle

        self.refresh()
        status = f"{self.status} · step {self.final_step}/{self.job.steps}"
        if self.error:
            status += f" · {self.error}"
        bundle = final_bundle(self, status)
        return _Html(bundle["text/html"], bundle["text/plain"])

    def resume(self, steps: int | None = None, **overrides: Any) -> NoReturn:
        raise invalid("run", self.id, "a live run for run.resume(); a recorded run resumes on a cluster: "
                      f"cluster.resume({self.id!r}, steps=...)")

    def job_description(self) -> "Job":
        """The job as it was launched (model, data, loss and optimizer included), unpickled
        from ``job.pkl``. Unpickling may import what the job's functions refer to."""
        import cloudpickle

        path = RunDir(self.run_dir).job_pkl
        if not path.exists():
            raise invalid("run", self.id, f"a run directory with job.pkl (runs recorded before it was kept, and "
                          f"{self.run_dir} is one, cannot be resumed from another kernel)")
        return cloudpickle.loads(path.read_bytes())

    def __repr__(self) -> str:
        state = self.status + (f": {self.error}" if self.error else "")
        return (f"<workbench.Run {self.id} {self.job.strategy} workers={self.job.workers} ps={self.job.ps} "
                f"{state}, step {self.final_step}/{self.job.steps}, recorded in {self.run_dir}>")


def _links(run_dir: Path, samples: LinkSamples | None) -> LinkSamples | None:
    """The link samples a run on a test bed wrote to its directory (``links.jsonl``), or
    None for a run that has none; ``samples``: what an earlier call returned, to which only
    the samples written since are added."""
    samples = samples or LinkSamples()
    rows, samples.offset = RunDir(run_dir).read_links(samples.offset)
    samples.add(rows)
    return samples if samples.count else None


def _read_weights(path):
    import numpy as np

    with np.load(path) as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


class _Html:
    def __init__(self, html, text):
        self.html, self.text = html, text

    def _repr_html_(self):
        return self.html

    def __repr__(self):
        return self.text


def resume(cluster: Any, run: "str | os.PathLike | BaseRun", steps: int | None = None, workers: int | None = None,
           ps: int | None = None, stall_timeout: float = 60.0, start_timeout: float = 180.0) -> Run:
    """``Cluster.resume``: continue a recorded run on ``cluster`` from its last checkpoint."""
    from workbench.common import strategies, validate

    if isinstance(run, Run) and run.cluster is cluster:
        return run.resume(steps=steps, stall_timeout=stall_timeout, start_timeout=start_timeout)
    job, steps = resume_job(run, steps=steps, workers=workers, ps=ps)
    validate.topology(strategies.spec(job.strategy), job.workers, job.ps, available=len(cluster.engine_info))
    stall_timeout = validate.positive_float("stall_timeout", stall_timeout)
    start_timeout = validate.positive_float("start_timeout", start_timeout)
    return cluster.launch(job, resume=True, steps=steps, stall_timeout=stall_timeout, start_timeout=start_timeout)


def resume_job(run: "str | os.PathLike | BaseRun", steps: int | None = None, workers: int | None = None,
               ps: int | None = None) -> "tuple[Job, int]":
    """The job a resume of recorded run ``run`` launches (in its run directory, with
    ``workers`` and ``ps`` where they may change) and the steps it trains to, checked
    without a cluster: the CLI refuses a resume before it starts one."""
    from dataclasses import replace

    from workbench.common import strategies, validate

    run_dir = resolve(run)
    recorded = RecordedRun(run_dir)
    if recorded.status == "running":
        raise invalid("run", recorded.id, "a run that is not running (it is: stop it first, "
                      f"wb.load({recorded.id!r}).stop(), or wait for it)")
    saved = recorded.checkpoint
    if saved is None:
        raise invalid("run", recorded.id, "a run with a checkpoint to continue from "
                      f"({RunDir(run_dir).checkpoints_dir} has none)")
    job = recorded.job_description()
    steps = job.steps if steps is None else validate.positive_int("steps", steps)
    if steps < saved:
        raise invalid("steps", steps, f"at least {saved}, the step of the run's last checkpoint")
    job = _retopology(job, workers, ps)
    validate.topology(strategies.spec(job.strategy), job.workers, job.ps)
    return replace(job, run_dir=str(run_dir)), steps  # where it is now (a home may have moved)


def _retopology(job, workers, ps):
    """What a resume may change is its spec's ``elastic``: the number of synchronous workers
    (the model's variables are mirrored, saved once), or of asynchronous workers and
    parameter servers (unsharded variables are restored wherever they are placed). The
    strategy, the model, the data and the global batch stay: they define the run."""
    from dataclasses import replace

    from workbench.common import strategies

    changes = {k: v for k, v in (("workers", workers), ("ps", ps)) if v is not None and v != getattr(job, k)}
    if not changes:
        return job
    spec = strategies.spec(job.strategy)
    allowed = spec.elastic
    for name, value in changes.items():
        if name not in allowed:
            raise invalid(name, value, f"{getattr(job, name)}, as the run had: a {job.strategy!r} run resumes "
                          f"with " + (f"another number of {' or '.join(allowed)} only" if allowed else
                                      "the topology it was saved with"))
    if job.variable_partitioner is not None and "ps" in changes:
        raise invalid("ps", changes["ps"], f"{job.ps}, as the run had: its variables are sharded over its PS tasks")
    workers = changes.get("workers", job.workers)
    if job.global_batch_size % spec.replicas(workers, job.devices):
        raise invalid("workers", workers, f"a divisor of the run's global batch of {job.global_batch_size}, "
                      "so every replica gets the same batch")
    return replace(job, **changes)
