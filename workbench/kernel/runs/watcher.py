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
from workbench.common.logs import LOGS, Line, parse
from workbench.common.protocols import Metrics, ServerResult, TaskResult
from workbench.engine import tasklogs
from workbench.errors import EngineError, RunStopped
from workbench.kernel.runs import files
from workbench.kernel.runs.recovery import EngineWatch
from workbench.store import ResultRecord, RunDir
from workbench.store.files import read_text_lines

_POLL = 0.05
HANG_AFTER = 5.0  # s without a step before a synchronous run's tasks are read (or 10 steps' time, if longer)
CONFIRM = 2.0  # s between two reads of a hung run's tasks
# s without a step before a task found at the same line of the user's code in two reads is
# named stuck there (or 20 steps' time, or a sixth of the stall timeout, if longer): a user's
# function may be slow for seconds and go on (a file read, a first batch), where a stopped,
# unreachable or ended task is certain at the first read
USER_CODE_AFTER = 10.0
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
        # a replacement's result in, the old one's out, at once: the old one, collected by
        # this thread as the swap happened, once stood for the replacement's, whose placement
        # event was never merged (the placement then named the lost engine)
        self._swapping = threading.Lock()
        self.error: BaseException | None = None
        self.finished: float | None = None
        self.progressed = time.monotonic()  # when the run's step last advanced
        self.done = threading.Event()
        self._tail = tail
        self._files: dict[str, tuple[int, int]] = {}  # server task -> (offset, lines) read of its log file
        unshared = unshared or []
        # hosts whose engines do not see the run directory: what they write there is
        # copied here while the run trains, and when it ends (``files.pull_run_files``)
        self.mirror = files.Mirror(run.run_dir, [t.name for t in run.tasks if t.host in unshared]) \
            if unshared else None
        spec = strategies.spec(run.job.strategy)
        self.chief = next((t.name for t in run.tasks if (t.role == spec.chief_role if spec.chief_role
                                                          else t.index == 0)), None)
        self.sync = spec.lockstep  # tasks in lockstep: a lost or frozen one can hang the others
        # asynchronous runs outlive a lost worker: the workbench brings a replacement up
        self.engines = EngineWatch(run, replace_workers=spec.has_ps)
        self._cell = current_cell()  # the cell that started the run: where this thread's output goes
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
        with self._swapping:
            self.results[name] = ar
            self.outcome.pop(name, None)
        self.run.log.restart_source(name)  # the replacement counts its rows from 0
        self.run.log.lines.restart(name)  # and its lines from 1
        self._files.pop(name, None)  # its file is read from where its own capture began

    def _take(self, name: str, ar: Any) -> None:
        """What task ``name`` has published so far: merged, and mirrored into the run
        directory when its host does not see it."""
        data = ar.data
        rows, events = self.run.log.merge(data, name)
        lines = self.run.log.lines.merge(name, data.get(LOGS) if data else None)
        if "log_offset" in self.outcome.get(name, {}) and (self.mirror is None or name not in self.mirror.names):
            lines += self.run.log.lines.merge(name, self._server_lines(name))
        if self.mirror is not None:
            error = self.mirror.take(name, data, rows, events, lines)
            if error is not None:  # a full disk here does not end the run: said once
                self.run.note("run_files_not_copied", error=error, step=self.run.step)

    def _server_lines(self, name: str) -> list[Line]:
        """The lines of server task ``name`` (a parameter-server worker or PS task) since
        the last read, from its log file, numbered as its windows number them (the file
        holds them in that order). Its capture goes on after its task returned, but what
        it publishes then does not reach this kernel's ``AsyncResult.data`` (measured: its
        engine's file grew, the kernel's window stayed at its first); on a host that does
        not see the run directory those lines come with its capture's end, and its file
        with the run's end. The file is read from where the task's capture began."""
        offset, count = self._files.get(name) or (self.outcome[name]["log_offset"], 0)
        text, offset = read_text_lines(RunDir(self.run.run_dir).log_file(name), offset)
        lines = parse(text)
        self._files[name] = (offset, count + len(lines))
        return [(count + i + 1, *line) for i, line in enumerate(lines)]

    def _watch(self):
        enter_cell(self._cell)
        run = self.run
        self.progressed, last_step = time.monotonic(), -1
        intervals = deque(maxlen=20)  # s between the last steps' arrivals
        first, last_read = None, 0.0  # the first read of a hung run's tasks (time, stacks); the last's time
        run_dir = RunDir(run.run_dir)
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
                request = run_dir.claim_stacks()
                if request is not None:  # the Workbench panel's Stacks button
                    run_dir.answer_stacks(request, [s.record() for s in self.engines.read_stacks().values()])
                step, now = run.step, time.monotonic()
                if step != last_step:
                    if last_step > 0:
                        intervals.append(now - self.progressed)
                    self.progressed, last_step, first = now, step, None
                idle = now - self.progressed
                limit = self.start_timeout if step == 0 else self.stall_timeout
                step_s = statistics.median(intervals) if intervals else 0.0
                hang_after = max(HANG_AFTER, 10 * step_s)
                user_after = max(USER_CODE_AFTER, 20 * step_s, self.stall_timeout / 6)
                judge_user = first is not None and idle >= user_after and now - first[0] >= CONFIRM
                if self.sync and step > 0 and hang_after < idle <= limit \
                        and (now - last_read >= CONFIRM or (judge_user and last_read < self.progressed + user_after)):
                    stacks = self.engines.read_stacks()
                    last_read = time.monotonic()
                    why = (f"the same line of your code for {now - first[0]:.0f} s, no step for {idle:.0f} s: "
                           f"max({USER_CODE_AFTER:.0f} s, 20 steps' time, stall_timeout / 6)" if judge_user else
                           f"no step for {hang_after:.0f} s: max({HANG_AFTER:.0f} s, 10 times its recent step time)")
                    self.error = self.engines.hang(stacks, first[1] if judge_user else None, idle, why)
                    if self.error is not None:
                        break
                    first = first or (last_read, stacks)
                if (self.sync or step == 0) and idle > limit:
                    # every run has a start timeout; only synchronous ones can stall later
                    self.error = self.engines.stalled(self.engines.read_stacks(), first and first[1], limit) \
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
            self._end_captures()
            if self.mirror is not None:
                self._pull_files()
            self.finished = time.time()
            self._write_record()
            self.done.set()

    def _task(self, name):
        return next((t for t in self.run.tasks if t.name == name), None)

    def _collect(self, name: str, ar: Any) -> None:
        run = self.run
        if self.results.get(name) is not ar:  # replaced meanwhile: the replacement's is collected
            return
        task = self._task(name)
        if run.cluster.pool.alive(task.engine_id):
            # its last publishes (its last log lines; the final checkpoint) may come after its result
            ar.wait_for_output(5)
            self._take(name, ar)
        try:
            result = ar.get()
        except Exception as e:
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
        with self._swapping:
            if self.results.get(name) is not ar:
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

    def _end_captures(self):
        """End the output capture of the run's server tasks (parameter-server workers and PS
        tasks: their task returned when their server was up, their capture went on while
        the run trained), on engines still there, and merge their last lines."""
        run = self.run
        ending = []
        for t in run.tasks:
            if "server" in self.outcome.get(t.name, {}) and run.cluster.pool.alive(t.engine_id):
                try:
                    ending.append((t.name, run.cluster.client[t.engine_id].apply_async(tasklogs.end)))
                except IndexError:  # its process alive but stopped: the controller dropped it (no heartbeat)
                    continue
        deadline = time.monotonic() + 10
        for name, ar in ending:
            try:
                lines = run.log.lines.merge(name, ar.get(timeout=max(0.1, deadline - time.monotonic())))
            except Exception:  # noqa: BLE001 - an engine that does not answer ends its capture at its next task
                continue
            if self.mirror is not None and name in self.mirror.names:
                self.mirror.take(name, None, [], [], lines)

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


# -- the cell a run's threads write to --------------------------------------------------------
# A run's kernel threads (this watcher, its dashboard) live on while the user runs other
# cells. ipykernel 7 sends what a thread prints or displays with the parent header of
# whichever cell runs at that moment: it no longer follows a thread back to the cell that
# started it (ipykernel#1450, #1451). These threads enter the cell that started their run
# (``enter_cell``: ipykernel's ``set_thread_parent``, this thread's stream and display
# output only). Two kinds of message keep the running cell's parent on purpose: widget
# updates (comm messages) reach a widget by its comm id in every frontend, and nbclient
# records a widget's state for the saved notebook only from the running cell's messages;
# an update of an earlier display reaches it by its display id, so a thread leaves its cell
# before sending one (``leave_cell``), as IPython's own ``update_display`` from a later cell
# goes with that cell (nbclient and nbval read only the running cell's messages).


def _shell() -> Any:
    """The IPython kernel's shell of this process, or None (plain Python, a terminal IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def current_cell() -> dict | None:
    """The parent header of the cell running in this thread now, or None outside a kernel."""
    shell = _shell()
    return shell.get_parent() if shell is not None and hasattr(shell, "get_parent") else None


def enter_cell(parent: dict | None) -> Any:
    """Send this thread's prints and displays with ``parent`` (a ``current_cell()`` of the cell
    that started the run). Returns what ``leave_cell`` takes; None where there is nothing to
    do (no kernel, no parent, or an ipykernel before 7 that follows threads itself)."""
    shell = _shell()
    set_thread = getattr(shell, "set_thread_parent", None)
    if parent is None or set_thread is None:
        return None
    return set_thread(parent)


def leave_cell(tokens: Any) -> None:
    """Undo an ``enter_cell``: this thread's output goes with the running cell's parent again."""
    shell = _shell()
    if tokens is not None and shell is not None:
        shell.reset_thread_parent(tokens)

