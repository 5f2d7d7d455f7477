"""A task's log lines, as every process spells them: how an engine writes them to its
file in the run directory (``logs/<task>.log``), how any process reads them back, and
which of them are the notices TensorFlow prints at every start (folded in every view).

A line of the file is ``<time> <stream> <text>``: the time it was written (``time.time()``,
to the millisecond), ``out`` or ``err``, then the text as the task wrote it
(``1795654427.085 err I0000 ... Started server with target: grpc://...``). Text never holds
a newline; a task's line cut short by its process dying is read as it was written.

Published windows (``engine/tasklogs.py``) carry the same lines as ``Line`` tuples, each
with its number in the task's output (``seq``, from 1), so that the kernel merges each once,
into a run's ``TaskLogs`` (beside its rows and events, ``kernel/runs/log.py``): from the
windows each task publishes while it runs, from a server task's last window when the kernel
ends its capture, and, for a recorded run, from its files. It keeps at most ``KEEP`` (the
oldest go first: the files keep every line); ``TaskLogs.frame`` builds ``run.logs()``'s
table from them, start-up notices folded into one line per task.
"""

from __future__ import annotations

import heapq
import re
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

STREAMS = ("out", "err")  # stdout, stderr: fd 1 and 2 and Python's sys.stdout and sys.stderr
LOGS = "logs"  # the published key of a task's window of lines, beside the metrics' own keys

Line = tuple[int, float, str, str]  # (seq, time, stream, text), as windows carry them

# What TensorFlow (and the libraries it loads) prints every time a process starts, builds a
# server, joins a cluster or builds its input: the same lines in every task and every run,
# folded into one per task in every view; the file keeps them. Two kinds: info lines of
# TensorFlow's C++ log (``I0000 00:00:1795655138.836746   25441 grpc_server_lib.cc:467] ...``)
# from the sources that print only such notices (their warnings and errors, a lost peer's
# among them, are never folded), and lines known by their text, whatever their prefix.
_CPP = re.compile(r"^(?P<level>[IWEF])\d{4} [\d:.]+\s+\d+ (?P<source>[\w.]+?)\.(cc|h):\d+\] ")
NOTICE_SOURCES = frozenset({
    "cpu_feature_guard", "port", "grpc_server_lib", "coordination_service", "coordination_service_agent",
    "collective_param_resolver_distributed", "generator_dataset_op", "cuda_dnn", "cuda_fft", "cuda_blas",
    "cuda_executor", "cudart_stub", "computation_placer", "eager_service_impl",
})
NOISE = re.compile("|".join([
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"^To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags",
    r"oneDNN custom operations are on",
    r"will not be optimized because the dataset does not implement the AsGraphDefInternal\(\) method",
    r"Unable to register cu(DNN|FFT|BLAS) factory",
    r"TF-TRT Warning: Could not find TensorRT",
    r"^/job:[^/\s]+/replica:\d+/task:\d+$",  # the task list under "Example stragglers:"
    r"Ignoring error status when releasing multi-device function handle",  # after every call (PS)
]))
# The lines that continue a notice (its session options, printed as protobuf text under it)
_CONTINUED = re.compile(r"^\s*$|^\s*[A-Za-z_][\w.]*\s*\{$|^\s*\}$|^\s*[A-Za-z_][\w.]*: \S")


def format_line(time: float, stream: str, text: str) -> str:
    """One line of a task's log file, its newline included."""
    return f"{time:.3f} {stream} {text}\n"


def parse(text: str) -> list[tuple[float, str, str]]:
    """``(time, stream, text)`` of each line of a log file's ``text`` (``format_line``'s);
    a line that does not parse (not written by a task) is skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 2 or parts[1] not in STREAMS:
            continue
        try:
            out.append((float(parts[0]), parts[1], parts[2] if len(parts) == 3 else ""))
        except ValueError:
            continue
    return out


def is_noise(text: str, after_noise: bool = False) -> bool:
    """Is ``text`` one of TensorFlow's start-up notices: an info line of its C++ log from one
    of ``NOTICE_SOURCES``, or a line ``NOISE`` knows? ``after_noise``: the line before it,
    on the same stream of the same task, was one; then protobuf text continues it."""
    if after_noise and _CONTINUED.match(text):
        return True
    cpp = _CPP.match(text)
    if cpp is not None and cpp["level"] == "I" and cpp["source"] in NOTICE_SOURCES:
        return True
    return NOISE.search(text) is not None


def folded(count: int | None, where: str) -> str:
    """The one line that stands for a task's ``count`` start-up notices (None: not known
    yet, as they come), kept whole in ``where``."""
    lines = "" if count is None else f"{count} line{'s' if count != 1 else ''} of "
    return f"[{lines}TensorFlow start-up notices folded; in full in {where}]"


KEEP = 50_000  # lines a run keeps in memory
COLUMNS = ["time", "elapsed", "step", "task", "stream", "line"]
DTYPES = [float, float, int, object, object, object]

Entry = tuple[float, str, str, str, bool]  # (time, task, stream, text, noise)


class TaskLogs:
    """The log lines of one run's tasks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[Entry] = []
        self._base = 0  # entries dropped from the front (KEEP): cursors count from the first ever
        self._seen: dict[str, int] = {}  # task -> the number of its last line merged
        self._noise: dict[tuple[str, str], bool] = {}  # (task, stream) -> was its last line a notice

    def merge(self, task: str, window: dict[str, Any] | list[Line] | None) -> list[Entry]:
        """Merge a window of task ``task``'s lines (what it published: ``{"lines": [...],
        "n": ...}``, or the list of lines its capture's end returned); returns the new ones.
        Lines its engine made while none of its windows reached this kernel (a window
        holds the last ``engine/tasklogs.WINDOW``) are counted in one line saying so."""
        if not window:
            return []
        lines = window["lines"] if isinstance(window, dict) else window
        if not lines:
            return []
        with self._lock:
            seen = self._seen.get(task, 0)
            if lines[-1][0] < seen:  # a replacement engine counts its lines from 1 again
                seen = 0
            fresh = [line for line in lines if line[0] > seen]
            if not fresh:
                return []
            new: list[Entry] = []
            missed = fresh[0][0] - seen - 1
            if missed > 0:
                new.append((fresh[0][1], task, "err", f"[{missed} lines of {task} did not reach this kernel live: "
                                                      "they are in its log file]", False))
            new += self._entries_of(task, [line[1:] for line in fresh])
            self._seen[task] = fresh[-1][0]
            self._append(new)
        return new

    def extend(self, task: str, lines: list[tuple[float, str, str]]) -> None:
        """Add lines read from task ``task``'s log file ((time, stream, text))."""
        with self._lock:
            self._append(self._entries_of(task, lines))

    def _entries_of(self, task, lines):
        """Entries of task ``task``'s ``lines`` ((time, stream, text)), each marked a notice or not."""
        out = []
        for t, stream, text in lines:
            noise = self._noise[(task, stream)] = is_noise(text, self._noise.get((task, stream), False))
            out.append((t, task, stream, text, noise))
        return out

    def restart(self, task: str) -> None:
        """``task``'s next window counts its lines from 1 (a replacement engine took it)."""
        with self._lock:
            self._seen.pop(task, None)
            for key in [k for k in self._noise if k[0] == task]:
                del self._noise[key]

    def _append(self, new: list[Entry]) -> None:
        self._entries += new
        if len(self._entries) > KEEP * 1.25:  # trimmed in chunks, not one line at a time
            drop = len(self._entries) - KEEP
            del self._entries[:drop]
            self._base += drop

    @property
    def count(self) -> int:
        """How many lines have arrived (the Logs view's cache key)."""
        return self._base + len(self._entries)

    def frame(self, started: float, history: pd.DataFrame, where: str, task: str | None = None,
              since: float | None = None, last: int | None = None) -> pd.DataFrame:
        """``run.logs()``'s table: ``time``, ``elapsed`` (seconds since ``started``), ``step``
        (the highest step ``history`` had by then), ``task``, ``stream``, ``line``, in time
        order; each task's start-up notices folded into one line at the first's place
        (``where``: the folder of the files that keep them). ``task``: its lines only;
        ``since``: lines after that many seconds only; ``last``: the newest that many."""
        import pandas as pd

        with self._lock:
            entries = [e for e in self._entries if task is None or e[1] == task]
        plain = [e[0] for e in entries if not e[4]]
        if last is not None and since is None and len(plain) > last:  # the newest only (every notice: counted)
            cut = heapq.nlargest(last, plain)[-1] if last else float("inf")
            entries = [e for e in entries if e[4] or e[0] >= cut]
        if not entries:
            return pd.DataFrame({c: pd.Series(dtype=d) for c, d in zip(COLUMNS, DTYPES)})
        df = pd.DataFrame(entries, columns=["time", "task", "stream", "line", "noise"])
        df = fold(df, where).sort_values("time", kind="stable")
        df["elapsed"] = df["time"] - started
        if since is not None:
            df = df[df["elapsed"] > since]
        if last is not None:
            df = df.iloc[max(0, len(df) - last):]
        df = df.assign(step=steps_at(df["time"].to_numpy(float), history))
        return df[COLUMNS].reset_index(drop=True)


def fold(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """Each task's start-up notices (``noise``) as one line where its first one was, saying
    how many there were and in which file they are whole."""
    noise = df["noise"].to_numpy(bool)
    if not noise.any():
        return df
    counts = df[noise].groupby("task").size()
    first = df[noise].groupby("task").head(1).index
    df = df[~noise | df.index.isin(first)].copy()
    df.loc[first, "line"] = [folded(int(counts[t]), f"{where}/{t}.log") for t in df.loc[first, "task"]]
    return df


def steps_at(times: np.ndarray, history: pd.DataFrame) -> np.ndarray:
    """The highest step ``history`` had reached at each of ``times`` (0 before its first)."""
    import numpy as np

    if not len(history) or not len(times):
        return np.zeros(len(times), dtype=int)
    order = np.argsort(history["time"].to_numpy(float), kind="stable")
    at = history["time"].to_numpy(float)[order]
    reached = np.maximum.accumulate(history["step"].to_numpy(int)[order])
    index = np.searchsorted(at, times, side="right") - 1
    return np.where(index >= 0, reached[np.clip(index, 0, None)], 0)


def text(df: pd.DataFrame) -> str:
    """``run.logs()``'s table as the CLI and ``%wb logs`` print it: a line each, its elapsed
    seconds, the step the run had reached, the task and the stream first."""
    width = max([len(t) for t in df["task"]] + [4])
    return "".join(f"{e:8.2f} s  step {s:<6} {t:<{width}} {st}  {line}\n"
                   for e, s, t, st, line in zip(df["elapsed"], df["step"], df["task"], df["stream"], df["line"]))
