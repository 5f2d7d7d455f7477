"""Which task a hung run waits for, read from every task's state and stacks (pure logic).

When a synchronous run stops stepping, its tasks look alike from outside: each is alive,
each is inside the same training call. Their stacks tell them apart. A task whose peers
wait for it is one of:

- stopped: its process is stopped (state T: SIGSTOP, a debugger's job control); it answers
  nothing until continued;
- unreachable: its TF server does not answer from the kernel (a host down, a link cut);
- not answering: alive, its TF server answers, its debug thread does not (a process stuck
  holding the GIL);
- gone: its process ended;
- in the user's code: a thread in a function the kernel shipped (a ``dataset_fn``'s
  generator, a ``py_function``) while its main thread waits inside the training call,
  at the same line in two samples taken seconds apart (``runs/watcher.py``: the later
  one at least 10 s after the last step).

The others wait inside TensorFlow: a ``tf.function`` runs as one op
(``__inference_run_steps_and_agree_...``), and a collective inside it is asynchronous, so
no stack shows it (``py-spy --native`` shows the main thread in
``ProcessFunctionLibraryRuntime::RunSync``): the op read from TensorFlow's
``quick_execute`` frame is as close as a stack comes. ``engine/startup/debug.py`` reads the stacks;
``kernel/engines/stacks.py`` reads them from the kernel, by other means for a stopped
process.

A frame is ``[file, line, function, source, user, op]``; a thread ``{"name", "main",
"frames"}``, outermost frame first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# what a task is found to be when its stack cannot be asked for
STOPPED, UNREACHABLE, NOT_ANSWERING, GONE, ANSWERED = "stopped", "unreachable", "not answering", "gone", "answered"
_STATE_WHY = {
    STOPPED: "its process is stopped (state T: SIGSTOP or a debugger), not dead: it answers nothing until it "
             "is continued (SIGCONT)",
    UNREACHABLE: "its host is unreachable: {target} does not answer from here (a machine down or a link cut)",
    NOT_ANSWERING: "it does not answer: its TF server's port takes connections, but its debug thread does not "
                   "answer (stuck holding Python's GIL; on a host the kernel cannot look into, also a process "
                   "stopped by SIGSTOP or a debugger)",
    GONE: "its process ended",
}
_STDLIB = ("threading.py", "queue.py", "selectors.py", "socket.py", "subprocess.py", "contextlib.py")


@dataclass
class TaskStacks:
    """One task's state and, where they could be read, its threads' stacks. ``how``: what
    read them ("debug thread", "py-spy"), or why none could be read (``note``)."""

    task: str
    engine_id: int
    host: str = ""
    pid: int | None = None
    target: str = ""  # its TF server's address
    state: str = ANSWERED
    threads: list[dict[str, Any]] = field(default_factory=list)
    how: str = ""
    note: str = ""

    @property
    def label(self) -> str:
        pid = f", pid {self.pid}" if self.pid else ""
        host = f" on {self.host}" if self.host else ""
        return f"{self.task} (engine {self.engine_id}{host}{pid})"

    def user_frame(self) -> tuple[dict[str, Any], list] | None:
        """The innermost frame of the user's own code in any thread, with its thread."""
        for thread in sorted(self.threads, key=lambda t: not t.get("main")):
            for frame in reversed(thread["frames"]):
                if frame[4]:
                    return thread, frame
        return None

    def where(self) -> str:
        """Where this task is, in a line: the user's frame, else the main thread's op or
        innermost workbench frame."""
        if self.state != ANSWERED:
            return _STATE_WHY[self.state].format(target=self.target or "its TF port")
        found = self.user_frame()
        if found is not None:
            thread, (file, line, function, source, _, _) = found
            return f"in your code: {function} ({file}:{line}) `{source}`, thread {thread['name']!r}"
        main = next((t for t in self.threads if t.get("main")), None)
        if main is None:
            return "no main thread seen"
        op = next((f[5] for f in reversed(main["frames"]) if f[5]), None)
        ours = next((f for f in reversed(main["frames"]) if "/workbench/" in f[0]), None)
        called = f" (from {_short(ours[0])}:{ours[1]} {ours[2]})" if ours else ""
        if op:
            return f"inside TensorFlow, executing {op}{called}"
        if ours is None:
            return "idle: no task running"
        return f"in the workbench's {ours[2]} ({_short(ours[0])}:{ours[1]})"

    def in_step(self) -> bool:
        """Is its main thread inside a TensorFlow op the workbench called (the training
        step, where a synchronous task waits for its peers)?"""
        main = next((t for t in self.threads if t.get("main")), None)
        return main is not None and any(f[5] for f in main["frames"])

    def record(self, last: int | None = 10) -> dict[str, Any]:
        """This task's state, place and stacks as JSON (``store.schema.TaskStacksRecord``:
        what the Workbench panel shows; ``last``: as in ``text``)."""
        return {"task": self.task, "engine": self.engine_id, "host": self.host, "pid": self.pid, "state": self.state,
                "where": self.where(), "read_by": self.how or self.note, "text": self.text(last)}

    def text(self, last: int | None = None) -> str:
        """The stacks as text, most recent call last (``last``: each thread's innermost
        frames only, and only the main thread and threads in the user's code)."""
        head = f"--- {self.label}: {self.where()}"
        if not self.threads:
            return head + (f"\n    ({self.note})" if self.note else "")
        lines = [head + (f" [read by {self.how}]" if self.how else "")]
        for thread in self.threads:
            frames = thread["frames"]
            if last is not None and not thread.get("main") and not any(f[4] for f in frames):
                continue
            lines.append(f"Thread {thread['name']!r}{' (main)' if thread.get('main') else ''}:")
            shown = frames[-last:] if last else frames
            if len(shown) < len(frames):
                lines.append(f"  ... {len(frames) - len(shown)} outer frames")
            for file, line, function, source, user, op in shown:
                lines.append(f"  File \"{file}\", line {line}, in {function}" + ("  <- your code" if user else "")
                             + (f"  [executing {op}]" if op else ""))
                if source:
                    lines.append(f"    {source}")
        return "\n".join(lines)


def _short(path: str) -> str:
    return path.split("/workbench/", 1)[-1] if "/workbench/" in path else path


def stuck(now: dict[str, TaskStacks], before: dict[str, TaskStacks] | None = None) -> list[TaskStacks]:
    """The tasks the others wait for, from the stacks sampled ``now``: those stopped,
    unreachable, not answering or gone; else, given ``before`` (a sample taken earlier
    while the run made no step), those whose main thread waits in TensorFlow while one of
    their threads sits in the user's code at the same line in both samples (one sample
    cannot tell a stuck pipeline from a slow one). Empty when the stacks do not tell
    (every task inside TensorFlow, or one in the workbench's own code: a checkpoint, an
    evaluation)."""
    out = [s for s in now.values() if s.state != ANSWERED]
    if out or before is None:
        return out
    for name, s in now.items():
        found = s.user_frame()
        earlier = before.get(name)
        if found is not None and s.in_step() and earlier is not None and earlier.user_frame() == found:
            out.append(s)
    return out


def message(stacks: dict[str, TaskStacks], culprits: list[TaskStacks]) -> str:
    """One paragraph: who is stuck and why, and where each other task waits."""
    named = "; ".join(f"{s.label} is {s.where()}" if s.state == ANSWERED else f"{s.label}: {s.where()}"
                      for s in culprits)
    them = ", ".join(s.task for s in culprits)
    waiting = [f"{s.task} waits for {them} {s.where()}" for s in stacks.values() if s not in culprits]
    return named + (". " + "; ".join(waiting) if waiting else "")
