"""One definition of each figure a user reads about a run, for every place that shows one:
the dashboard (live and at the end), ``wb.compare``, the CLI (progress, summary, ``show``,
``runs``), the panel's records and ``%wb``. Pure numpy on the rows' ``step``, ``time``,
``step_time`` and ``loss``; no TF.

- **A step's end** is the latest ``time`` any worker reported that step at: a synchronous
  step is done when its slowest worker is; an asynchronous step has one row, stamped with
  the time its worker's call ended on that worker (the chief collects calls in the order it
  scheduled them, late and several at once while another worker's first call traces: at
  collection time a 60-step parameter-server run once read 607 steps/s for a true ~190).
- **steps/s** over a stretch of steps: the steps that ended inside it / its wall time, from
  the end of its first step to the end of its last. Checkpoints, evaluations and other
  pauses inside the stretch count: a step that waited is a slow step, never a fast one.
  Steps run in one call (a chunk of ``steps_per_execution``) are reported together at the
  call's end, their rows stamped with it (runs recorded before: rows less than ``BATCH_GAP``
  apart, which a busy core once spread over 7 ms, starting a 4-worker ring's stretch inside
  a call: 46 steps counted where 40 ran, its bytes per step read 0.92 of the ring's
  formula): the stretch starts at the end of
  the chunk that holds its first step, and that chunk's steps are not counted (they ran
  before it). Counted from inside a chunk, a 24-step run in chunks of 10 read 17 steps
  done in the time of 14 (x1.21). Asynchronous steps may end out of their numbers' order
  (two workers' calls overlap): steps are counted by when they ended, not by number.
- **Asynchronous steps are counted by the share of their call inside the stretch.** Under a
  parameter server each worker's call of ``steps_per_execution`` steps runs while the other
  workers' calls run: when the stretch starts, the other workers are inside calls begun
  before it, and at the run's end no call is left running. Counted whole, those calls'
  steps made a 60-step run of 3 workers read 19.5 steps/s where its PS link's bytes said
  14.2 (x1.38; x1.2-1.4 for every run of 3 workers measured, up to x1.08 for 2). Each of
  its chunks counts the share of its span (its rows' ``step_time``, from the end of the
  worker's previous call) that lies inside the stretch: 0.93-1.03 of the links' figure.
  Live, a run's other workers are inside calls not reported yet: its whole-run figure
  reads low by up to half a call per other worker over the steps so far, until the end.
- **Too short to measure**: a stretch holding fewer than ``MIN_ENDS`` distinct step ends
  (chunks of rows ``BATCH_GAP`` apart; its start counts) gives NaN, which every view
  prints as "too short to measure", never as a rate: two ends time one interval, which may
  hold any number of steps reported at once (a 40-step parameter-server run whose chief
  stamped its rows when it collected them held two: 4,417 steps/s, its workers ~260).
- **examples/s** of a run: steps/s x the global batch (every global step consumes one
  global batch, whatever the strategy). A worker's own examples/s (the rows'
  ``examples_per_s``, the per-worker chart) is what it measured around its steps.
- **step time**: the median of the rows' ``step_time``: seconds one worker spent on one
  step as its engine timed it, around its training call (the time between calls, where
  the engine publishes metrics and agrees on stopping, is not in it: 1 / step time is not
  steps/s; under a parameter server from the end of the worker's previous call, its waits
  for the chief included).
- **scaling efficiency**: examples/s / (workers x examples/s of one worker alone).
- **A run's figures** leave out its first fifth of steps, by end time (tracing, warm-up),
  and its **wall time** is from the end of its first step to the end of its last.
- **A resumed run's figures** are those of its newest attempt, the steps from
  ``first_step`` (the resumed checkpoint's step + 1) on, as if it were a run of its own:
  the pause between attempts is no training time (issue 35.6: a run whose attempts ran at
  371.5 and 213.7 steps/s read 50.7 with it), and a resume may change the workers and PS
  tasks. A live ``Run``
  holds only its newest attempt's rows; a recorded run's files hold every attempt's.
- **final loss** (a run's "loss" wherever one number stands for it, live or ended): the
  mean over its last ``LAST_STEPS`` steps of each step's loss (the mean of its workers'
  rows), in its newest attempt.
- **Live figures** are the same steps/s over the steps that ended in the last ``RECENT_S``
  seconds.
"""

from typing import NamedTuple, TypedDict

import numpy as np

RECENT_S = 5.0  # the live figures' window (seconds)
BATCH_GAP = 0.002  # rows closer than this in time were published together (one chunk of steps)
MIN_ENDS = 3  # distinct step ends a stretch must hold for a rate: two intervals timed
LAST_STEPS = 10  # the final loss is the mean over this many last steps
TOO_SHORT = "too short to measure"


class Figures(TypedDict):
    steps_per_s: float
    examples_per_s: float
    step_time: float  # seconds
    wall_time: float  # seconds, first step's end to last step's end
    final_loss: float


def step_ends(steps: "np.typing.ArrayLike", times: "np.typing.ArrayLike") -> tuple[np.ndarray, np.ndarray]:
    """(the distinct steps in order, each one's end: the latest time a worker reported it)."""
    steps = np.asarray(steps, dtype=np.int64)
    times = np.asarray(times, dtype=float)
    if not len(steps):
        return steps, times
    order = np.lexsort((times, steps))  # by step, then time: a step's last row is its end
    steps, times = steps[order], times[order]
    last = np.r_[steps[1:] != steps[:-1], True]
    return steps[last], times[last]


def _start(ordered: np.ndarray) -> int:
    """Index in ``ordered`` (step ends, sorted) of the end of the first chunk: its last row."""
    return int(np.searchsorted(ordered, ordered[0] + BATCH_GAP, side="right")) - 1


def stretch(steps: "np.typing.ArrayLike", ends: "np.typing.ArrayLike") -> tuple[int, float, int, float]:
    """(first, began, last, ended) of the stretch ``steps_per_s`` times over ``steps``
    (with their ends, any order): from the end of the chunk of rows that ended first
    (``BATCH_GAP``) to the latest end. ``last`` is the highest step and ``last - first``
    the steps that ended inside the stretch (``first`` is the step at its start when steps
    end in their order, as synchronous ones do). NaN times for no steps."""
    steps, ends = np.asarray(steps, np.int64), np.asarray(ends, float)
    if not len(steps):
        return 0, float("nan"), 0, float("nan")
    ordered = np.sort(ends)
    start = _start(ordered)
    last = int(steps.max())
    return last - (len(ordered) - 1 - start), float(ordered[start]), last, float(ordered[-1])


def distinct_ends(ends: "np.typing.ArrayLike") -> int:
    """How many distinct ends (chunks of rows more than ``BATCH_GAP`` apart) the stretch
    over ``ends`` holds, its start included."""
    ordered = np.sort(np.asarray(ends, float))
    if not len(ordered):
        return 0
    inside = ordered[_start(ordered):]
    return 1 + int(np.count_nonzero(np.diff(inside) > BATCH_GAP))


def steps_per_s(steps: "np.typing.ArrayLike", ends: "np.typing.ArrayLike") -> float:
    """Steps that ended per second of wall time over ``steps`` (with their ends, any
    order), counted from the end of the chunk that ended first (``stretch``). NaN when the
    stretch holds fewer than ``MIN_ENDS`` distinct ends: too short to measure."""
    first, began, last, ended = stretch(steps, ends)
    if distinct_ends(ends) < MIN_ENDS:
        return float("nan")
    return float(last - first) / (ended - began)


def asynchronous(workers: "np.typing.ArrayLike | None", distinct: int) -> bool:
    """Are these rows (each one's ``workers``) an asynchronous run's: several workers, nearly
    every step reported by one of them (a synchronous run's steps by each of its workers; a
    recorded asynchronous run that was resumed repeats the few steps past its checkpoint)?
    ``distinct``: how many distinct steps the rows hold (``step_ends``)."""
    if workers is None or not len(workers):
        return False
    codes = _codes(workers)
    return bool(codes.min() != codes.max()) and distinct > 0.75 * len(codes)


class Count(NamedTuple):
    """An asynchronous run's steps inside a stretch: ``steps`` (``counted``) between
    ``began`` and ``ended``."""

    steps: float
    began: float
    ended: float

    @property
    def rate(self) -> float:
        """The steps/s they make."""
        return self.steps / (self.ended - self.began)


def asynchronous_count(kept: np.ndarray, kept_ends: np.ndarray, times: "np.typing.ArrayLike",
                       step_times: "np.typing.ArrayLike", workers: "np.typing.ArrayLike | None",
                       distinct: int) -> Count | None:
    """For an asynchronous run's rows (``asynchronous``): the steps ``counted`` inside the
    stretch of the steps it times (``kept`` with their ``kept_ends``), with its start and
    end; None for any other run's, whose steps count as ``stretch`` says."""
    if not asynchronous(workers, distinct):
        return None
    _, began, _, ended = stretch(kept, kept_ends)
    return Count(counted(times, step_times, workers, began, ended), began, ended)


def _codes(labels: "np.typing.ArrayLike") -> np.ndarray:
    """Integer codes of row labels (workers' names): ints as they are, else by first sight."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu":
        return labels
    import pandas as pd  # hashing, not sorting, 200,000 names: ~15 ms

    return pd.factorize(labels)[0]


def counted(times: "np.typing.ArrayLike", step_times: "np.typing.ArrayLike", workers: "np.typing.ArrayLike",
            began: float, ended: float) -> float:
    """The asynchronous steps done between ``began`` and ``ended``: each chunk (one
    worker's rows less than ``BATCH_GAP`` apart, stamped with the end of its call) counts
    its steps times the share of its span, the sum of its rows' ``step_time``, that lies
    between them. A chunk without a step time (NaN or 0) counts whole if it ended inside."""
    times, step_times = np.asarray(times, float), np.asarray(step_times, float)
    if not len(times):
        return 0.0
    codes = _codes(workers)
    order = np.lexsort((times, codes))
    w, t, st = codes[order], times[order], np.nan_to_num(step_times[order])
    starts = np.flatnonzero(np.r_[True, (w[1:] != w[:-1]) | (np.diff(t) > BATCH_GAP)])  # a chunk: one call's rows
    k = np.diff(np.r_[starts, len(t)])
    span, end = np.add.reduceat(st, starts), t[np.r_[starts[1:], len(t)] - 1]  # its last row's time
    inside = np.clip(np.minimum(end, ended) - np.maximum(end - span, began), 0.0, None)
    share = np.where(span > 0, inside / np.where(span > 0, span, 1.0), ((end > began) & (end <= ended)).astype(float))
    return float((k * share).sum())


def examples_per_s(rate: float, global_batch_size: int) -> float:
    """A run's examples/s at ``rate`` global steps per second."""
    return float(rate) * int(global_batch_size)


def step_time(step_times: "np.typing.ArrayLike") -> float:
    """The median of the rows' step times (seconds); NaN when none was measured."""
    values = np.asarray(step_times, float)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else float("nan")


def scaling_efficiency(examples: float, workers: int, one_worker: float) -> float:
    """``examples`` examples/s of ``workers`` workers against ``workers`` times what one
    worker alone did (``one_worker`` examples/s): 1.0 is perfect scaling."""
    return float(examples) / (int(workers) * float(one_worker))


def steady(ends: np.ndarray) -> np.ndarray:
    """Which of a run's steps (their ``ends``) its figures count: those that ended no
    earlier than the step a fifth of the way through them, in the order they ended."""
    if len(ends) < 2:
        return np.ones(len(ends), bool)
    return ends >= np.sort(ends)[len(ends) // 5]


def final_loss(steps: "np.typing.ArrayLike", losses: "np.typing.ArrayLike", first_step: int = 1) -> float:
    """The mean over the last ``LAST_STEPS`` steps from ``first_step`` on of each step's
    mean loss over its rows (NaN losses left out); NaN without any."""
    steps = np.asarray(steps, dtype=np.int64)
    losses = np.asarray(losses, float)
    keep = (steps >= first_step) & np.isfinite(losses)
    steps, losses = steps[keep], losses[keep]
    if not len(steps):
        return float("nan")
    s, inverse = np.unique(steps, return_inverse=True)
    per_step = np.bincount(inverse, weights=losses) / np.bincount(inverse)
    return float(per_step[-LAST_STEPS:].mean())


def run_figures(steps: "np.typing.ArrayLike", times: "np.typing.ArrayLike", step_times: "np.typing.ArrayLike",
                global_batch_size: int, losses: "np.typing.ArrayLike | None" = None, first_step: int = 1,
                workers: "np.typing.ArrayLike | None" = None) -> Figures:
    """A run's figures from its rows (one per worker and step), over its newest attempt's
    (steps from ``first_step`` on): steps/s and examples/s after its first fifth of steps,
    the median step time over the same steps, wall time, and the final loss of ``losses``.
    ``workers``: each row's worker; an asynchronous run's steps are then counted by the
    share of their calls inside the stretch (``counted``)."""
    steps = np.asarray(steps, dtype=np.int64)
    times = np.asarray(times, float)
    step_times = np.asarray(step_times, float)
    attempt = steps >= first_step
    steps, times, step_times = steps[attempt], times[attempt], step_times[attempt]
    workers = None if workers is None else _codes(np.asarray(workers)[attempt])
    loss = float("nan") if losses is None else final_loss(steps, np.asarray(losses, float)[attempt])
    s, ends = step_ends(steps, times)
    if not len(s):
        nan = float("nan")
        return {"steps_per_s": nan, "examples_per_s": nan, "step_time": nan, "wall_time": nan, "final_loss": loss}
    keep = steady(ends)
    rate = steps_per_s(s[keep], ends[keep])
    count = asynchronous_count(s[keep], ends[keep], times, step_times, workers, len(s)) if np.isfinite(rate) else None
    if count is not None:
        rate = count.rate
    inside = np.isin(steps, s[keep])
    return {"steps_per_s": rate, "examples_per_s": examples_per_s(rate, global_batch_size),
            "step_time": step_time(step_times[inside]), "wall_time": float(ends.max() - ends.min()),
            "final_loss": loss}


def recent_steps_per_s(steps: "np.typing.ArrayLike", times: "np.typing.ArrayLike", window: float = RECENT_S) -> float:
    """The live steps/s: ``steps_per_s`` over the steps that ended in the last ``window``
    seconds before the newest step's end (NaN when too short to measure)."""
    steps, times = np.asarray(steps, dtype=np.int64), np.asarray(times, dtype=float)
    if len(times):  # a step ends at its latest row: rows older than the window end no step in it
        inside = times >= times.max() - window  # (the CLI asks 5 times a second: sort the window only)
        steps, times = steps[inside], times[inside]
    s, ends = step_ends(steps, times)
    keep = ends >= (ends.max() - window) if len(ends) else ends.astype(bool)
    return steps_per_s(s[keep], ends[keep])


def history_figures(history: "object", global_batch_size: int, first_step: int = 1) -> Figures:
    """``run_figures`` of a ``run.history`` DataFrame (columns step, time, step_time, loss, worker)."""
    h = history
    step_times = h["step_time"].values if "step_time" in h else np.full(len(h), np.nan)
    losses = h["loss"].values if "loss" in h else None
    workers = h["worker"].values if "worker" in h else None
    return run_figures(h["step"].values, h["time"].values, step_times, global_batch_size, losses, first_step,
                       workers=workers)


def steady_stretch(history: "object", first_step: int = 1) -> tuple[float, float, int, float]:
    """(first step, its end, last step, its end) of the stretch a ``run.history``'s
    steps/s counts (``history_figures``; ``stretch`` says what first and last are): what to
    measure anything else over, e.g. link counters, so that it covers exactly the steps
    the figure counts, ``last - first`` of them (asynchronous steps: the shares of their
    calls inside it, ``counted``, so ``first`` may be fractional)."""
    h = history[history["step"] >= first_step]
    s, ends = step_ends(h["step"].values, h["time"].values)
    if not len(s):
        return stretch(s, ends)
    keep = steady(ends)
    first, began, last, ended = stretch(s[keep], ends[keep])
    workers = _codes(h["worker"].values) if "worker" in h else None
    step_times = h["step_time"].values if "step_time" in h else None
    count = None if step_times is None else asynchronous_count(s[keep], ends[keep], h["time"].values, step_times,
                                                                 workers, len(s))
    if count is not None:
        first = last - count.steps
    return first, began, last, ended


def worker_shares(history: "object", first_step: int = 1, stretch: tuple | None = None) -> dict[str, float]:
    """{worker: its share of the rows that ended inside the stretch steps/s counts}
    (``steady_stretch``, or its ``stretch`` when the caller has it): how a parameter server's
    global steps fell on its workers, each row a step (a faster worker does more of them;
    its link carries its own steps only)."""
    first, began, last, ended = steady_stretch(history, first_step) if stretch is None else stretch
    if "worker" not in history or not len(history):
        return {}
    h = history[(history["step"] >= first_step) & (history["time"] > began) & (history["time"] <= ended)]
    counts = h.groupby("worker").size()
    return {str(w): float(c) / float(counts.sum()) for w, c in counts.items()} if len(h) else {}


def scope(first_step: int) -> str:
    """What a run's figures cover, as views say it: its whole run, or its newest attempt."""
    return "whole run" if first_step <= 1 else f"since the resume at step {first_step - 1}"
