"""Watch a run's engines while it trains: replace lost parameter-server workers, fail
fast on any other loss.

ParameterServerStrategy's coordinator survives a worker's loss: it re-runs the lost
worker's steps on the others and keeps dialling the lost address. The workbench gives it
something to find: a fresh engine on the same port, running the same worker task (its
TF server), started in the background while the run goes on. A lost PS task, chief or
synchronous worker ends the run: the watcher names it at once (by PID for local engines)
instead of leaving the survivors to time out. A task whose process is stopped (SIGSTOP:
alive, answering nothing) is named as stopped, not dead; a synchronous run that stops
stepping is read task by task (``hang``: their stacks, ``common/hangs.py``) to name the
task the others wait for. A synchronous run that makes no step for ``QUIET`` seconds has its
peers on other hosts asked directly: one whose TF server no longer answers from here is named
then, whatever the controller's heartbeat (which drops such an engine after ~4 s on the
workbench's own clusters, ~30 s with ipyparallel's defaults, as an attached ``ipcluster`` has
them).
"""

import threading
import time
from typing import Any

from workbench.common import hangs
from workbench.common.payload import dumps
from workbench.engine import entry
from workbench.errors import EngineError, ProfilerCrashed, RunStalled
from workbench.kernel.engines import stacks
from workbench.kernel.engines.health import answer, answers, crashed_in_profiler, unreachable

QUIET = 2.0  # s without a step before a synchronous run's peers on other hosts are asked (each at most once a QUIET)

_STOPPED = "its process is stopped (state T: SIGSTOP or a debugger), not dead"
SHOWN_FRAMES = 6  # innermost frames per thread in a hang's message (``RunStalled.stacks``: all)


class EngineWatch:
    """A run's engines, checked from its watcher thread (``run``: the ``Run``; it and its
    cluster's ``pool`` are used through their public methods only)."""

    def __init__(self, run: Any, replace_workers: bool) -> None:
        self.run = run
        self.replace_workers = replace_workers
        self._threads = {}  # task name -> replacement thread
        self._noted = set()  # (task name, engine id) of workers noted lost: a failed replacement is not retried
        self._last_check = 0.0
        self._recycling = threading.Lock()  # one recycling of this run's engines at a time
        self._quiet = (-1, 0.0, 0.0)  # (the step last seen, since when, last asked)

    def check(self, every: float = 0.25) -> EngineError | None:
        """Called from the run's watcher. Starts replacing lost PS workers; returns an
        ``EngineError`` naming the task for any other lost engine, else None."""
        now = time.monotonic()
        if now - self._last_check < every:
            return None
        self._last_check = now
        lost = []
        for t in list(self.run.tasks):
            name = t.name
            busy = name in self._threads and self._threads[name].is_alive()
            if busy or (name, t.engine_id) in self._noted:
                continue
            # alive: a stopped task holds a parameter-server run's closures (named here); a
            # synchronous run's hang is named with every task's stacks (``hang``)
            if self.run.cluster.pool.alive(t.engine_id) and not (self.replace_workers and self.stopped(t)):
                continue
            if not (self.replace_workers and t.role == "worker"):
                return self.lost(t)
            self.run.note("worker_lost", task=name, engine=t.engine_id, step=self.run.step,
                          **({"error": _STOPPED} if self.stopped(t) else {}))
            self._noted.add((name, t.engine_id))
            lost.append(t)
        if lost:
            # the coordinator keeps reconnecting in the background after the run; a later
            # run in that process has crashed it: its engine is replaced after this run
            self.run.cluster.pool.condemn([c.engine_id for c in self.run.tasks if c.role == "chief"])
            # workers lost together (a host's) are replaced together: one recycling at a time
            thread = threading.Thread(target=self._replace, args=(lost,), daemon=True,
                                      name=f"workbench-replace-{'-'.join(t.name for t in lost)}")
            for t in lost:
                self._threads[t.name] = thread
            thread.start()
        return None if self.replace_workers else self.silent_peer(now)

    def silent_peer(self, now: float) -> EngineError | None:
        """A synchronous run that has made no step for ``QUIET`` s: the error for a peer on
        another host whose TF server does not answer from here (its host cut off, or its
        process gone), else None. Peers answer within milliseconds even while a checkpoint
        or an evaluation holds the steps up; before the first step they may still be
        starting their servers."""
        step, since, asked = self._quiet
        if self.run.step != step:
            self._quiet = (self.run.step, now, asked)
            return None
        if step == 0 or now - since < QUIET or now - asked < QUIET:
            return None
        self._quiet = (step, since, now)
        pool = self.run.cluster.pool
        peers = [t for t in self.run.tasks if t.target and not pool.is_local(t.engine_id)]
        heard = answers([t.target for t in peers], timeout=1.0)
        return next((self.lost(t, heard[t.target]) for t in peers if heard[t.target] != "open"), None)

    def lost_peer(self, failed: Any) -> Any | None:
        """When ``failed`` raised in a synchronous run: the peer whose loss it saw, if any
        (a task whose engine left, or, on another host, whose TF server no longer answers:
        the controller's heartbeat notices a lost host seconds after its peers do), else None.
        Before the first step peers may still be starting their servers: None."""
        pool = self.run.cluster.pool
        if self.run.step == 0:
            return None
        for t in self.run.tasks:
            if t is failed:
                continue
            if not pool.alive(t.engine_id):
                return t
            if t.target and not pool.is_local(t.engine_id) and answer(t.target, timeout=1.0) != "open":
                return t
        return None

    def stopped(self, task: Any) -> bool:
        """Is ``task``'s engine a local process stopped (state T), alive but answering nothing?"""
        pool = self.run.cluster.pool
        info = pool.info.get(task.engine_id)
        return info is not None and pool.is_local(task.engine_id) and stacks.process_state(info.pid) == "T"

    def _resume(self) -> str:
        saved = self.run.checkpoint_steps()
        return f"its last checkpoint is at step {max(saved)}" if saved else "it saved no checkpoint yet"

    def lost(self, task: Any, answered: str | None = None) -> EngineError:
        """The error for a task whose engine died or, local, was stopped (``answered``: how
        its TF server answered from here just now, if it was asked)."""
        run, name = self.run, task.name
        pool = run.cluster.pool
        info = run.cluster.engine_info.get(task.engine_id)
        host = getattr(info, "host", None) or task.host
        resume = self._resume()
        why, where = ("its process ended" if not self.stopped(task) else _STOPPED), ""
        if not pool.is_local(task.engine_id):  # on another host: its process gone, or its host cut off?
            where = f" on {host}"
            heard = (answered or answer(task.target)) if task.target else None
            if heard == "silent":
                why = (f"its host {host} is unreachable: {task.target} does not answer from here (a machine "
                       "down or a link cut)")
            elif heard == "open":  # the controller dropped it, yet its TF server's port takes connections
                why = (f"the controller stopped hearing from it, but its TF server at {task.target} still takes "
                       "connections: its process is there but does not run (stopped by SIGSTOP or a debugger, "
                       "or frozen), not ended")
        output = run.cluster.engine_output(task.engine_id) if pool.is_local(task.engine_id) else ""
        # the engine's own process, as its stacks name it (an engine forked by a remote host's
        # zygote registers its launcher's stand-in)
        pid = (pool.debug_channel(task.engine_id) or {}).get("pid") or getattr(info, "pid", "?")
        kind = EngineError
        if crashed_in_profiler(output):
            kind, why = ProfilerCrashed, ("it crashed inside TensorFlow's profiler as run.profile()'s trace "
                                          "stopped (a TF bug, see wb.ProfilerCrashed)")
        output = f"\nIts last output:\n{output}" if output else ""
        others = stacks.read(pool, [t for t in run.tasks if t is not task])  # where the others were left
        left = "".join(f"\n  {s.task} {s.where()}" for s in others.values())
        return kind(
            f"{name} (engine {task.engine_id}{where}, pid {pid}) was lost at step "
            f"{run.step}: {why}. The run stopped; {resume}. run.resume() starts its tasks on fresh "
            f"engines and continues from there.{output}"
            + (f"\nThe other tasks as it was lost (their stacks: the error's .stacks):{left}" if left else ""),
            role=task.role, task=task.index, engine_id=task.engine_id,
            stacks={n: s.text() for n, s in others.items()})

    def read_stacks(self) -> dict[str, hangs.TaskStacks]:
        """Every task's state and stacks, read now (``kernel/engines/stacks.py``)."""
        return stacks.read(self.run.cluster.pool, list(self.run.tasks))

    def hang(self, now: dict[str, hangs.TaskStacks], before: dict[str, hangs.TaskStacks] | None,
             idle: float, why: str) -> RunStalled | None:
        """The error naming the task(s) a synchronous run waits for, read from its stacks
        ``now`` and ``before`` (``hangs.stuck``), ``idle`` s after its last step (``why``:
        what had it looked at); None when the stacks do not tell. Noted as a ``hang`` event."""
        culprits = hangs.stuck(now, before)
        if not culprits:
            return None
        return self._hang_error(now, culprits, idle, why)

    def stalled(self, now: dict[str, hangs.TaskStacks], before: dict[str, hangs.TaskStacks] | None,
                limit: float) -> RunStalled:
        """The error for a synchronous run without a step for ``limit`` s (its stall timeout):
        the task(s) it waits for where the stacks tell, else where each task is. Without an
        earlier sample (a stall timeout shorter than ``watcher.HANG_AFTER``), a task found in
        the user's code after ``limit`` s without a step is taken as stuck there."""
        culprits = hangs.stuck(now, before or now)
        if culprits:
            return self._hang_error(now, culprits, limit, f"stall_timeout {limit:.0f} s")
        run = self.run
        where = "; ".join(f"{s.task} {s.where()}" for s in now.values())
        return self._error(f"Run {run.id} made no progress for {limit:.0f} s (stall_timeout) at step {run.step}; "
                           f"its stacks do not tell which task the others wait for: {where}", now, [], role="worker")

    def _hang_error(self, now, culprits, idle, why):
        run = self.run
        first = next(t for t in run.tasks if t.name == culprits[0].task)
        return self._error(f"Run {run.id} hung at step {run.step}: {hangs.message(now, culprits)}. Named {idle:.1f} s "
                           f"after its last step ({why})", now, culprits, role=first.role, task=first.index,
                           engine_id=first.engine_id)

    def _error(self, text, now, culprits, **where):
        texts = {name: s.text() for name, s in now.items()}
        self.run.note("hang", step=self.run.step, stuck=[s.task for s in culprits], cause=text, stacks=texts)
        shown = "\n".join(s.text(last=SHOWN_FRAMES) for s in now.values())
        return RunStalled(f"{text}. The run stopped; {self._resume()}. run.resume() continues it on fresh engines. "
                          f"Each task's stacks (the main thread's and any in your code; all of them in the "
                          f"error's .stacks and in run.events):\n{shown}", stacks=texts, **where)

    def start_timed_out(self, limit: float) -> RunStalled:
        """The error for a run that made no step within its start timeout: names the tasks
        whose TF server this machine cannot reach, else the task that should have stepped."""
        run = self.run
        info = run.cluster.engine_info
        servers = [t for t in run.tasks if t.target and t.role != "chief"]
        down = unreachable([t.target for t in servers])
        where = {t.name: f"{t.name} ({t.target}, engine {t.engine_id} on {getattr(info.get(t.engine_id), 'host', '?')})"
                 for t in run.tasks}
        first = next((t for t in run.tasks if t.role == "chief"), run.tasks[0])
        if down:
            cause = "could not reach " + ", ".join(where[t.name] for t in servers if t.target in down)
        else:
            cause = f"{where[first.name]} made no step; every task's TF server answers"
        return RunStalled(f"Run {run.id} made no step within {limit:.0f} s of its start (start_timeout): {cause}. "
                          "Its engines are being recycled.", role=first.role, task=first.index,
                          engine_id=first.engine_id)

    def _replace(self, tasks):
        run = self.run
        pool = run.cluster.pool
        try:
            with self._recycling:
                mapping = run.cluster.recycle([t.engine_id for t in tasks], same_ports=True)
        except Exception as e:  # the run goes on with the workers it has
            for t in tasks:
                run.note("worker_not_replaced", task=t.name, step=run.step, error=f"{type(e).__name__}: {e}")
            return
        started = []
        for task in tasks:
            try:
                new = pool.retarget(task, mapping)
                ar = run.cluster.client[new.engine_id].apply_async(entry.run_task, dumps(run.job), new)
                started.append((task, new, ar))
            except Exception as e:
                run.note("worker_not_replaced", task=task.name, step=run.step, error=f"{type(e).__name__}: {e}")
        for task, new, ar in started:
            try:
                ar.get(timeout=run.start_timeout)
                pool.mark([new])
                run.swap_task(task, new, ar)
                run.note("worker_replaced", task=task.name, engine=new.engine_id, step=run.step)
            except Exception as e:
                run.note("worker_not_replaced", task=task.name, step=run.step, error=f"{type(e).__name__}: {e}")

    def join(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        for thread in list(self._threads.values()):
            thread.join(max(0.0, deadline - time.monotonic()))
