"""Engines' stacks read from the kernel while they train, and their consoles.

Each engine runs a debug thread (``workbench/engine/startup/debug.py``) on its own address: the
kernel asks it over TCP, on any host it reaches TF ports on (SSH, MPI and Slurm hosts
alike). Measured on a 2-worker MWMS run here: ``run.stacks()`` 8-46 ms for both tasks
(median 9 ms), of which the engine's own dump is 0.4 ms. A process that cannot answer is
told apart:

- a local engine stopped (``/proc/<pid>/stat`` state T) or holding the GIL: read from
  outside by ``py-spy dump --nonblocking`` (70-290 ms; a zygote's forked engine too,
  stopped or not; ``--native`` took 12.8 s and shows the main thread waiting in
  ``ProcessFunctionLibraryRuntime::RunSync``, not which collective: not used);
- a remote engine whose TF port does not answer from here: unreachable (its host down or
  cut off), its stack unreadable from here as from its peers;
- a remote engine that answers on its TF port but not on its debug thread: not answering.

Why not ``faulthandler`` on a signal: its dump is as cheap (0.7 ms), but it writes into the
engine's own log on its own host, and a stopped process runs no handler. TensorFlow's collectives are asynchronous, so no
native stack names the one a task waits in (``common/hangs.py``).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from workbench.common.hangs import GONE, NOT_ANSWERING, STOPPED, UNREACHABLE, TaskStacks
from workbench.common.pids import alive
from workbench.common.sockets import read_line
from workbench.kernel.engines.health import answer

TIMEOUT = 2.0  # s for a debug thread to answer


def ask(channel: dict[str, Any], request: dict[str, Any], timeout: float = TIMEOUT) -> dict[str, Any]:
    """Send ``request`` to an engine's debug thread (``channel``: ``EnginePool.debug_channel``);
    its JSON answer. Raises ``OSError`` (``TimeoutError`` included) when it does not answer."""
    host, port = channel["target"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as conn:
        conn.settimeout(timeout)
        conn.sendall(json.dumps(dict(request, token=channel["token"])).encode() + b"\n")
        data = read_line(conn, 1 << 20)
        if not data.endswith(b"\n"):
            raise ConnectionError(f"the debug thread at {channel['target']} closed the connection")
    return json.loads(data)


def process_state(pid: int) -> str | None:
    """A local process's state letter (``/proc/<pid>/stat``: R, S, D, T stopped, t traced,
    Z), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def read(pool: Any, tasks: list[Any], timeout: float = TIMEOUT) -> dict[str, TaskStacks]:
    """``{task name: TaskStacks}`` of ``tasks`` (``roles.Task``) on ``pool``'s engines, all
    asked at once: none waits for another's timeout."""
    if not tasks:
        return {}
    with ThreadPoolExecutor(min(len(tasks), 16)) as threads:
        return dict(zip([t.name for t in tasks], threads.map(lambda t: _read_or_say(pool, t, timeout), tasks)))


def _read_or_say(pool: Any, task: Any, timeout: float) -> TaskStacks:
    """``read_task``, or a task whose note says why its stacks could not be read: the run's
    watcher reads stacks to name a hang, and a failure there must not end the watcher."""
    try:
        return read_task(pool, task, timeout)
    except Exception as e:  # noqa: BLE001 - shown in the task's row, not raised in the watcher
        return TaskStacks(task.name, task.engine_id, host=task.host, target=task.target or "",
                          note=f"reading its stacks failed: {type(e).__name__}: {e}")


def read_task(pool: Any, task: Any, timeout: float = TIMEOUT) -> TaskStacks:
    """One task's state and stacks (see the module's docstring for how each is read)."""
    info = pool.info.get(task.engine_id)
    channel = pool.debug_channel(task.engine_id)
    local = pool.is_local(task.engine_id)
    pid = (channel or {}).get("pid") or getattr(info, "pid", None)
    s = TaskStacks(task.name, task.engine_id, host=getattr(info, "host", "") or task.host, pid=pid,
                   target=task.target or "")
    if local and pid and process_state(pid) in (None, "Z"):
        s.state, s.note = GONE, "its process ended"
        return s
    if local and pid and process_state(pid) == "T":
        s.state = STOPPED
        return _py_spy(s)
    if channel is not None:
        try:
            reply = ask(channel, {"op": "stacks"}, timeout)
            if "threads" in reply:
                s.threads, s.how = reply["threads"], "debug thread"
                if task.target and answer(task.target, timeout=timeout) == "silent":  # its peers cannot reach it either
                    s.state = UNREACHABLE
                return s
            s.note = f"its debug thread refused: {reply.get('error')}"
        except OSError as e:
            s.note = f"its debug thread at {channel['target']} did not answer within {timeout:g} s ({type(e).__name__})"
    else:
        s.note = "no debug thread known for this engine (an attached run's engine, busy when this kernel attached)"
    if local:
        if pid and process_state(pid) == "T":  # stopped while it was asked
            s.state = STOPPED
        elif not (pid and alive(pid)):
            s.state, s.note = GONE, "its process ended"
            return s
        elif channel is not None:
            s.state = NOT_ANSWERING
        return _py_spy(s)
    if task.target and answer(task.target, timeout=timeout) != "open":
        s.state = UNREACHABLE
    elif channel is not None:
        s.state = NOT_ANSWERING
    return s


_PYSPY_THREAD = re.compile(r'^Thread (?P<ident>\S+) \((?P<state>[^)]*)\)(?:: "(?P<name>.*)")?$')
_PYSPY_FRAME = re.compile(r"^\s+(?P<function>.+?) \((?P<file>.+):(?P<line>\d+)\)$")


def _py_spy(s: TaskStacks) -> TaskStacks:
    """``s`` with its stacks read from outside by py-spy, where it is installed."""
    exe = shutil.which("py-spy")
    if exe is None:
        s.note = ((s.note + "; " if s.note else "")
                  + "py-spy, which reads a stopped process's stack, is not installed here (pip install py-spy)")
        return s
    try:
        out = subprocess.run([exe, "dump", "--nonblocking", "--pid", str(s.pid)], capture_output=True, text=True,
                             timeout=10, check=False)
    except subprocess.TimeoutExpired:
        s.note = (s.note + "; " if s.note else "") + "py-spy took more than 10 s"
        return s
    if out.returncode != 0:
        s.note = (s.note + "; " if s.note else "") + f"py-spy failed: {out.stderr.strip()[-300:]}"
        return s
    s.threads, s.how = parse_py_spy(out.stdout), "py-spy"
    return s


def parse_py_spy(text: str) -> list[dict[str, Any]]:
    """py-spy's ``dump`` text as ``engine/startup/debug.py``'s threads (outermost frame first;
    py-spy names files relative to their package directory, and no op)."""
    from workbench.common.payload import SHIPPED

    threads = []
    for line in text.splitlines():
        head = _PYSPY_THREAD.match(line)
        if head:
            threads.append({"name": head["name"] or head["ident"], "ident": head["ident"], "frames": [],
                            "main": head["name"] == "MainThread"})
            continue
        frame = _PYSPY_FRAME.match(line)
        if frame and threads:
            file = frame["file"]
            threads[-1]["frames"].insert(0, [file, int(frame["line"]), frame["function"], "",
                                             file in SHIPPED or file == "<dynamic-code>", None])
    return threads


def run_code(channel: dict[str, Any] | None, code: str, timeout: float) -> dict[str, Any]:
    """Run ``code`` in an engine's console (``engine/startup/debug.py``'s ``run_code``): its
    ``output``, and ``value`` or ``error``."""
    if channel is None:
        raise ConnectionError("no debug thread known for this engine (an attached run's engine, busy when this "
                              "kernel attached)")
    return ask(channel, {"op": "exec", "code": code}, timeout)


class Stacks(dict):
    """Every task's stacks, read at once (``Run.stacks()``): ``{task name: text}``, most
    recent call last; ``tasks``: the ``TaskStacks``; ``table``: one row per task (state,
    where it is, what read it). Shown as the table, then each task's stacks."""

    def __init__(self, tasks: dict[str, TaskStacks]) -> None:
        super().__init__({name: s.text() for name, s in tasks.items()})
        self.tasks = tasks

    @property
    def table(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"task": s.task, "engine": s.engine_id, "host": s.host, "pid": s.pid, "state": s.state,
                              "where": s.where(), "read by": s.how or s.note} for s in self.tasks.values()])

    def __str__(self) -> str:
        return "\n\n".join(self.values())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        import html

        parts = [self.table.to_html(index=False)]
        for name, text in self.items():
            parts.append(f"<details><summary>{html.escape(name)}</summary><pre>{html.escape(text)}</pre></details>")
        return "".join(parts)


class Console:
    """Python run inside ``task``'s engine while it trains, beside its training thread
    (``engine/startup/debug.py``): its model, optimizer, step, strategy, job and task are names
    there, and what one call defines the next sees. ``console(code)`` returns what a REPL
    would show (what ``print`` wrote, then the repr of a last expression); an error raises
    ``EngineError`` with the engine's traceback."""

    def __init__(self, pool: Any, task: Any) -> None:
        self.pool = pool
        self.task = task

    def __call__(self, code: str, timeout: float = 30.0) -> str:
        from workbench.errors import EngineError

        t = self.task
        try:
            reply = run_code(self.pool.debug_channel(t.engine_id), code, timeout)
        except OSError as e:
            raise EngineError(f"{t.name} (engine {t.engine_id}): its console did not answer: {e}", role=t.role,
                              task=t.index, engine_id=t.engine_id) from None
        if "error" in reply:
            raise EngineError(f"{t.name} (engine {t.engine_id}) console:\n{reply['error']}", role=t.role,
                              task=t.index, engine_id=t.engine_id, remote_traceback=reply["error"])
        value = reply.get("value")
        return reply.get("output", "") + (value + "\n" if value is not None else "")

    def __repr__(self) -> str:
        return f"<workbench console on {self.task.name} (engine {self.task.engine_id})>"
