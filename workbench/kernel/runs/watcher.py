"""``Watcher``: the kernel thread that follows one live run.

It merges what the engines publish into the run's log while it trains, collects each
task's result, notices failures (a lost engine, a task that raised, a synchronous run that
stalls) and stops hung peers. It sends nothing on the ipyparallel client but stop requests
(``client.abort``, which hands its message to the client's IO thread); engine replacement
happens on the next call that needs the cluster, in the caller's thread. For tasks on hosts
without the run directory it keeps the kernel's copy of what they write there current
(``runs/files.py``). When the run ends it writes the run's result file, then sets ``done``.
"""

from __future__ import annotations

import linecache
import os
import re
import statistics
import threading
import time
from collections import deque
from typing import Any

from IPython import get_ipython

from workbench.common import payload, strategies
from workbench.common.protocols import Metrics, ServerResult, TaskResult
from workbench.errors import EngineError, RunStopped
from workbench.kernel.runs import files
from workbench.kernel.runs.recovery import EngineWatch
from workbench.store import ResultRecord, RunDir

_POLL = 0.05
HANG_AFTER = 5.0  # s without a step before a synchronous run's tasks are read (or 10 steps' time, if longer)
CONFIRM = 2.0  # s between two reads that must show a task at the same line of the user's code
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# a frame's first line in an engine's traceback: IPython's ("File ~/x.py:12, in loss(y, p)",
# 8.x and 9.x) or Python's ('File "/x.py", line 12, in loss')
_FRAME = re.compile(r'^\s*File "?(?P<file>.+?)"?(?::|, line )(?P<line>\d+), in (?P<name>[^\s(]+)', re.MULTILINE)


def users_frames(tb: str) -> str:
    """The frames of ``tb``, an engine's traceback, in the user's own code (the files whose
    functions this kernel shipped by value, ``common/payload.py``), each with its line as
    this kernel has it: a section to read before the engine's ~50 lines of ipyparallel and
    workbench frames. A notebook cell is named as IPython names it here ("Cell In[3]")."""
    shell = get_ipython()
    lines = []
    for frame in _FRAME.finditer(tb):
        filename = os.path.expanduser(frame["file"])  # IPython writes the home as ~
        if filename not in payload.SHIPPED:
            continue
        cell = shell.compile.format_code_name(filename) if shell is not None else None
        where = f"{cell[0]} {cell[1]}" if cell else f'File "{filename}"'
        lines.append(f"  {where}, line {frame['line']}, in {frame['name']}\n")
        source = linecache.getline(filename, int(frame["line"])).strip()
        if source:
            lines.append(f"    {source}\n")
    return "--- your code (most recent call last) ---\n" + "".join(lines) + "\n" if lines else ""


class Watcher:
    """Follows ``run`` (a live ``Run``: its cluster, tasks, job and log) through
    ``results`` ({task name: AsyncResult}). ``tail``: a re-attached run's reader of the rows
    its engines wrote before this kernel watched it; ``unshared``: hosts whose engines do
    not see the run directory."""

    def __init__(self, run: Any, results: dict[str, Any], stall_timeout: float, start_timeout: float,
                 tail: Any = None, unshared: list[str] | None = None) -> None:
        self.run = run
        self.results = results
        self.stall_timeout = stall_timeout
        self.start_timeout = start_timeout
        self.outcome: dict[str, TaskResult | ServerResult] = {}  # task name -> what the task returned
        self.error: BaseException | None = None
        self.finished: float | None = None
        self.progressed = time.monotonic()  # when the run's step last advanced
        self.done = threading.Event()
        self._tail = tail
        unshared = unshared or []
        # hosts whose engines do not see the run directory: what they write there is
        # copied here while the run trains, and when it ends (``files.pull_run_files``)
        self.mirror = files.Mirror(run.run_dir, [t.name for t in run.tasks if t.host in unshared]) \
            if unshared else None
        spec = strategies.spec(run.job.strategy)
        self.chief = next((t.name for t in run.tasks if (t.role == spec.chief_role if spec.chief_role
                                                          else t.index == 0)), None)
        self.sync = spec.synchronous  # lockstep workers: a lost one can hang the others
        # asynchronous runs outlive a lost worker: the workbench brings a replacement up
        self.engines = EngineWatch(run, replace_workers=spec.has_ps)
        self.thread = threading.Thread(target=self._watch, name=f"workbench-run-{run.id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    # -- while the run trains ----------------------------------------------------------------
    def request_stop(self) -> None:
        """The STOP file in the run directory, and the same request through ipyparallel to
        tasks still running (engines on hosts without the run directory see that one)."""
        RunDir(self.run.run_dir).request_stop()
        running = [(t.engine_id, self.results[t.name]) for t in list(self.run.tasks)
                   if t.name in self.results and not self.results[t.name].ready()]
        self.run.cluster.pool.send_stop(running)

    def swap(self, name: str, ar: Any) -> None:
        """A replacement engine took over task ``name``: its result is collected afresh."""
        self.results[name] = ar
        self.outcome.pop(name, None)
        self.run.log.restart_source(name)  # the replacement counts its rows from 0

    def _take(self, name: str, ar: Any) -> None:
        """What task ``name`` has published so far: merged, and mirrored into the run
        directory when its host does not see it."""
        data = ar.data
        rows, events = self.run.log.merge(data, name)
        if self.mirror is not None:
            error = self.mirror.take(name, data, rows, events)
            if error is not None:  # a full disk here does not end the run: said once
                self.run.note("run_files_not_copied", error=error, step=self.run.step)

    def _watch(self):
        run = self.run
        self.progressed, last_step = time.monotonic(), -1
        intervals = deque(maxlen=20)  # s between the last steps' arrivals
        sample = None  # (monotonic time, stacks) of the last read of a hung run's tasks
        try:
            while True:
                for name, ar in list(self.results.items()):
                    self._take(name, ar)
                    if ar.ready() and name not in self.outcome:
                        self._collect(name, ar)
                if self.error is not None or len(self.outcome) == len(self.results):
                    break
                lost = self.engines.check()
                if lost is not None:
                    self.error = lost
                    break
                if self._tail is not None:
                    run.log.merge(self._tail())
                if self.mirror is not None and self.mirror.stop_to_forward():
                    self.request_stop()  # asked by the STOP file, which those hosts do not see
                step, now = run.step, time.monotonic()
                if step != last_step:
                    if last_step > 0:
                        intervals.append(now - self.progressed)
                    self.progressed, last_step, sample = now, step, None
                idle = now - self.progressed
                limit = self.start_timeout if step == 0 else self.stall_timeout
                hang_after = max(HANG_AFTER, 10 * statistics.median(intervals)) if intervals else HANG_AFTER
                if self.sync and step > 0 and idle > hang_after and idle <= limit \
                        and (sample is None or now - sample[0] >= CONFIRM):
                    stacks = self.engines.read_stacks()
                    self.error = self.engines.hang(stacks, sample and sample[1], idle,
                                                   f"no step for {hang_after:.0f} s: max({HANG_AFTER:.0f} s, 10 "
                                                   "times its recent step time)")
                    if self.error is not None:
                        break
                    sample = (time.monotonic(), stacks)
                if (self.sync or step == 0) and idle > limit:
                    # every run has a start timeout; only synchronous ones can stall later
                    self.error = self.engines.stalled(self.engines.read_stacks(), sample and sample[1], limit) \
                        if self.sync else self.engines.start_timed_out(limit)
                    break
                time.sleep(_POLL)
        finally:
            links = run.log.links
            if links is not None:
                links.sample()
                links.stop()
            self.engines.join()
            for name, ar in list(self.results.items()):  # a replacement that came up at the end
                if self.error is None and name not in self.outcome and ar.wait(5):
                    self._collect(name, ar)
            if self.error is not None:
                self._abort()
            if self.mirror is not None:
                self._pull_files()
            self.finished = time.time()
            self._write_record()
            self.done.set()

    def _task(self, name):
        return next((t for t in self.run.tasks if t.name == name), None)

    def _collect(self, name: str, ar: Any) -> None:
        run = self.run
        if self.mirror is not None and name in self.mirror.names and ar.successful():
            ar.wait_for_output(5)  # its last publishes (the final checkpoint) may come after its result
            self._take(name, ar)
        try:
            result = ar.get()
        except Exception as e:
            task = self._task(name)
            if not run.cluster.pool.alive(task.engine_id):  # ipyparallel: "Engine N died while ..."
                self.error = self.engines.lost(task)
                return
            peer = self.engines.lost_peer(task) if self.sync else None
            if peer is not None:  # a lockstep peer's loss made this task fail: name the lost one
                self.error = self.engines.lost(peer)
                return
            if self.sync and run.step > 0:  # a stopped or unreachable task (the heartbeat drops a stopped one)
                self.error = self.engines.hang(self.engines.read_stacks(), None, time.monotonic() - self.progressed,
                                               f"{name} failed: {getattr(e, 'ename', type(e).__name__)}")
                if self.error is not None:
                    return
            ename = getattr(e, "ename", type(e).__name__)
            evalue = getattr(e, "evalue", str(e))
            tb = _ANSI.sub("", getattr(e, "traceback", None) or str(e))
            self.error = EngineError(
                f"{name} (engine {task.engine_id}) failed: {ename}: {evalue}\n\n{users_frames(tb)}"
                f"--- engine traceback ---\n{tb}",
                role=task.role, task=task.index, engine_id=task.engine_id, remote_traceback=tb)
            return
        self.outcome[name] = result
        merged: Metrics = {"rows": result.get("rows", []), "events": result.get("events", [])}
        run.log.merge(merged)

    def _abort(self):
        """After a failure: stop every task. Synchronous peers blocked in a collective never
        return, so engines still busy after a grace period are killed (local ones, by PID)
        and replaced on the next use of the cluster."""
        self.request_stop()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not all(ar.ready() for ar in self.results.values()):
            time.sleep(_POLL)
        busy = [t.engine_id for t in self.run.tasks if not self.results[t.name].ready()]
        self.run.cluster.pool.condemn([t.engine_id for t in self.run.tasks], kill=busy)

    def _pull_files(self):
        """Copy what the tasks on hosts without the run directory wrote there (metrics files;
        the chief's checkpoints, TensorBoard logs, profiles) into it, from engines that ended
        their task and are still there."""
        run = self.run
        pool = run.cluster.pool
        tasks = [t for t in run.tasks if t.name in self.mirror.names and self.results[t.name].ready()
                 and pool.alive(t.engine_id)]
        if tasks:
            try:
                files.pull_run_files(run.cluster.client, tasks, str(run.run_dir), self.chief, timeout=60)
            except Exception as e:  # noqa: BLE001 - the run's end is recorded whatever happens here
                run.note("run_files_not_copied", error=f"{type(e).__name__}: {e}", step=run.step)

    def abandon(self) -> None:
        """The cluster is stopping under the run: it ends as stopped by the cluster."""
        if not self.done.is_set():
            self.error = self.error or RunStopped(f"Run {self.run.id}: the cluster was stopped")

    def _write_record(self):
        run = self.run
        record: ResultRecord = {
            "final_step": run.final_step, "finished": self.finished,
            "error": None if self.error is None else str(self.error).splitlines()[0],
            "stopped": run.stopped,
            "evaluation": run.evaluation,
        }
        run_dir = RunDir(run.run_dir)
        try:
            for r in self.outcome.values():  # the final weights, for kernels that load the run later
                if r.get("weights") is not None:
                    run_dir.write_weights(r["weights"])
            run_dir.write_result(record)
        except OSError:
            pass
