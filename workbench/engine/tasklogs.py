"""A task's stdout and stderr, captured on its engine while it runs: into its file in the
run directory (``logs/<task>.log``), and to the kernel, a window of its newest lines
published through ipyparallel.

Two kinds of output, caught at two levels:

- what Python writes (``print``, ``warnings``, Python logging): ``sys.stdout`` and
  ``sys.stderr`` of an engine are ipykernel's ``OutStream``s, which send it to the kernel's
  ``AsyncResult.stdout``/``stderr`` and never to a file descriptor. Their ``write`` is
  wrapped for the task's duration (on the object itself: handlers that hold the stream,
  as Python logging's do, go through it too);
- what native code writes to file descriptors 1 and 2 (TensorFlow's C++ log, ``tf.print``):
  each is pointed at a pipe, read by a thread of this module that passes every byte on to
  where the descriptor pointed before (the engine's log file, or ipykernel's own pipe,
  which forwards it to ``AsyncResult.stderr``) and records its lines. ipykernel's thread
  that reads its own pipe writes into the ``OutStream``: its writes are not recorded twice.

Each line is stamped with the time it ended and its stream (``common/logs.py`` spells the
file). The thread publishes, at most every ``INTERVAL`` seconds and only when lines came,
the lines of the last ``OVERLAP`` publishes (at most ``WINDOW``): a kernel that polls at
least once in that many publishes misses none. It publishes under the task's own message
(its ``AsyncResult.data``), from its own thread. A parameter-server worker or PS task
returns once its server is up; its capture goes on while the run trains (into its file:
what it publishes then no longer reaches the kernel's ``AsyncResult``, so the kernel
reads that file from the offset ``begin`` returned, ``kernel/runs/watcher.py``) until the
kernel ends it (``end``) when the run ends, or the next task on the engine starts. ``end`` restores both descriptors and both streams, joins the thread and
closes every descriptor it opened: nothing of the capture outlives it.

A process the task starts inherits descriptors 1 and 2, the pipes: what it writes after
the capture ended is lost (and, on a full pipe, it would block). Native code's output
buffered in C's ``stdout`` (not a terminal: flushed when full) is flushed at both ends.
"""

from __future__ import annotations

import codecs
import os
import select
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.common.logs import LOGS, Line, format_line
from workbench.store import RunDir

INTERVAL = 0.25  # seconds between publishes, at most
OVERLAP = 20  # publishes a line stays in the window (5 s at most 4 a second)
WINDOW = 1000  # lines a publish carries, at most
LONGEST = 1 << 16  # characters of a line without a newline (a progress bar's \r updates)
THREAD = "workbench-task-output"

_current: Capture | None = None


def begin(run_dir: str, name: str) -> int:
    """Capture this engine's output as task ``name``'s of the run in ``run_dir`` (ending any
    capture an earlier task left running). Returns the size its log file had: where this
    capture's lines begin in it (an earlier attempt's come before)."""
    global _current
    end()
    path = RunDir(run_dir).log_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    _current = Capture(path, _publisher())
    _current.start()
    return _current.start_offset


def end() -> list[Line]:
    """End the capture running on this engine, if any; returns its last window of lines
    (what the kernel merges when it ends a server task's capture)."""
    global _current
    capture, _current = _current, None
    return capture.stop() if capture is not None else []


class Capture:
    """Descriptors 1 and 2 and Python's two streams, recorded into ``path`` and published
    through ``publish`` (None: not on an ipyparallel engine)."""

    def __init__(self, path: Path, publish: Callable[[dict], None] | None) -> None:
        self.path = path
        self._publish = publish
        self._lock = threading.RLock()  # Python writes come from any thread
        self._file = open(path, "a", encoding="utf-8", errors="replace")
        self.start_offset = self._file.tell()  # the file's end: append mode opens there
        self._seq = 0
        self._window: deque[Line] = deque(maxlen=WINDOW)
        self._marks: deque[int] = deque(maxlen=OVERLAP)  # seq at each of the last publishes
        self._published = 0  # seq at the last publish
        self._last = 0.0
        self._partial: dict[tuple[str, Any], str] = {}  # (stream, writer) -> a line not ended yet
        self._saved: dict[int, int] = {}  # 1, 2 -> a copy of what they pointed at
        self._pipes: dict[int, tuple[str, int, Any]] = {}  # read end -> (stream, fd, its decoder)
        self._wake = os.pipe()
        self._hooked: list[tuple[Any, Any]] = []  # (Python stream, our write on it)
        self._thread = threading.Thread(target=self._pump, name=THREAD, daemon=True)

    def start(self) -> None:
        _flush_native()
        for fd, stream in ((1, "out"), (2, "err")):
            self._saved[fd] = os.dup(fd)
            read, write = os.pipe()
            os.dup2(write, fd)
            os.close(write)
            self._pipes[read] = (stream, fd, codecs.getincrementaldecoder("utf-8")(errors="replace"))
        for stream, target in (("out", sys.stdout), ("err", sys.stderr)):
            self._hook(stream, target)
        self._thread.start()

    def stop(self) -> list[Line]:
        """Everything back as it was; every line recorded, the file closed. Returns the last window."""
        for target, ours in self._hooked:
            if target.__dict__.get("write") is ours:
                del target.write
        _flush_native()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
        os.write(self._wake[1], b"x")  # the thread reads what is left in the pipes, then returns
        self._thread.join()
        for fd in (*self._saved.values(), *self._pipes, *self._wake):
            os.close(fd)
        with self._lock:
            for (stream, _), text in list(self._partial.items()):
                if text:
                    self._record(time.time(), stream, text)
            self._partial.clear()
            self._file.close()
            window = list(self._window)
        self._send(force=True)
        return window

    # -- what comes in -------------------------------------------------------------------
    def _hook(self, stream: str, target: Any) -> None:
        """Record what Python writes to ``target`` (an ipykernel ``OutStream``), unless it is
        a plain file on descriptor 1 or 2 (then the pipe records it) or cannot be wrapped."""
        try:
            if target.fileno() in (1, 2):
                return
        except (AttributeError, OSError, ValueError):
            pass
        original = target.write
        relay = getattr(target, "watch_fd_thread", None)  # ipykernel's reader of its own pipe

        def write(text: str) -> Any:
            written = original(text)
            if threading.current_thread() is not relay and isinstance(text, str):
                self.feed(stream, threading.get_ident(), text)
            return written

        try:
            target.write = write
        except (AttributeError, TypeError):
            return
        self._hooked.append((target, write))

    def feed(self, stream: str, writer: Any, text: str) -> None:
        """``text`` written to ``stream`` by ``writer`` (a thread, or a descriptor): its
        complete lines recorded, the rest kept until its newline comes."""
        with self._lock:
            if self._file.closed:
                return
            key = (stream, writer)
            *lines, rest = (self._partial.get(key, "") + text).split("\n")
            if len(rest) > LONGEST:
                lines.append(rest)
                rest = ""
            self._partial[key] = rest
            now = time.time()
            for line in lines:
                self._record(now, stream, line)

    def _record(self, now: float, stream: str, text: str) -> None:
        text = text.rstrip("\r").rsplit("\r", 1)[-1]  # a terminal shows what follows the last \r
        self._seq += 1
        now = round(now, 3)
        self._window.append((self._seq, now, stream, text))
        self._file.write(format_line(now, stream, text))

    # -- the thread ----------------------------------------------------------------------
    def _pump(self) -> None:
        poll = select.poll()
        for fd in (*self._pipes, self._wake[0]):
            poll.register(fd, select.POLLIN)
        stopping = False
        while not stopping:
            for fd, _ in poll.poll(INTERVAL * 1000):
                if fd == self._wake[0]:
                    stopping = True
                elif not self._forward(fd):
                    poll.unregister(fd)
            self._send()
        for fd in self._pipes:  # what was written before the descriptors were restored
            os.set_blocking(fd, False)
            while self._forward(fd):
                pass

    def _forward(self, fd: int) -> bool:
        """Read what is in pipe ``fd``: passed on to where its descriptor pointed before, and
        recorded. False when there is nothing (more) to read."""
        try:
            data = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return False
        if not data:
            return False
        stream, target, decoder = self._pipes[fd]
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._saved[target], view):]
            except InterruptedError:
                continue
            except OSError:  # where it pointed is gone: the capture still records it
                break
        self.feed(stream, target, decoder.decode(data))
        return True

    def _send(self, force: bool = False) -> None:
        """The window of new lines to the kernel, at most every ``INTERVAL`` seconds."""
        with self._lock:
            now = time.monotonic()
            if self._publish is None or self._seq == self._published or (not force and now - self._last < INTERVAL):
                return
            self._last, self._published = now, self._seq
            self._marks.append(self._seq)
            since = self._marks[0] if len(self._marks) == OVERLAP else 0
            lines = [line for line in self._window if line[0] > since]
            if not self._file.closed:  # other processes read the file as it grows
                self._file.flush()
        self._publish({LOGS: {"lines": lines, "n": self._published}})


def _flush_native() -> None:
    """C's buffered ``stdout`` and ``stderr`` written out now, to the descriptors they have now."""
    import ctypes

    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def _publisher() -> Callable[[dict], None] | None:
    """A ``publish_data`` bound to the running task's message, for the capture's thread:
    ipyparallel's own sends under whatever request the engine handles last."""
    try:
        from ipykernel.zmqshell import ZMQInteractiveShell
        from ipyparallel.serialize import serialize_object
    except ImportError:
        return None
    if not ZMQInteractiveShell.initialized():
        return None
    pub = getattr(ZMQInteractiveShell.instance(), "data_pub", None)
    if pub is None or getattr(pub, "session", None) is None:
        return None
    session, socket, topic, parent = pub.session, pub.pub_socket, pub.topic, dict(pub.parent_header)

    def publish(data: dict) -> None:
        buffers = serialize_object(data, buffer_threshold=session.buffer_threshold,
                                   item_threshold=session.item_threshold)
        session.send(socket, "data_message", content={"keys": list(data)}, parent=parent, buffers=buffers,
                     ident=topic)

    return publish
