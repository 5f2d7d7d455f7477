"""One definition of each speed figure a user reads about a run, for every place that shows
one: the dashboard (live and at the end), ``wb.compare``, the CLI's summary, the panel's
records and ``%wb``. Pure numpy on the rows' ``step``, ``time`` and ``step_time``; no TF.

- **A step's end** is the latest ``time`` any worker reported that step at: a synchronous
  step is done when its slowest worker is; an asynchronous step has one row.
- **steps/s** over a stretch of steps: steps done / wall time between the ends of its first
  and last step. Checkpoints, evaluations and other pauses inside the stretch count: a
  step that waited is a slow step, never a fast one. Steps run in one call (a chunk of
  ``steps_per_execution``) are reported together at the call's end, their rows less than
  ``BATCH_GAP`` apart: the stretch starts at the end of the chunk that holds its first
  step, and that chunk's steps are not counted (they ran before it). Counted from inside a
  chunk, a 24-step run in chunks of 10 read 17 steps done in the time of 14 (x1.21).
- **examples/s** of a run: steps/s x the global batch (every global step consumes one
  global batch, whatever the strategy). A worker's own examples/s (the rows'
  ``examples_per_s``, the per-worker chart) is what it measured around its steps.
- **step time**: the median of the rows' ``step_time`` (seconds one worker spent on one
  step, as the engine measured it).
- **scaling efficiency**: examples/s / (workers x examples/s of one worker alone).
- **A run's figures** leave out its first fifth of steps (tracing, warm-up), and its
  **wall time** is from the end of its first step to the end of its last.
- **final loss**: the mean over the last 10 steps of each step's loss (the mean of its
  workers' rows).
- **Live figures** are the same steps/s over the steps that ended in the last ``RECENT_S``
  seconds.
"""

from typing import TypedDict

import numpy as np

STEADY_FROM = 0.2  # a run's figures start after this share of its steps
RECENT_S = 5.0  # the live figures' window (seconds)
BATCH_GAP = 0.002  # rows closer than this in time were published together (one chunk of steps)


class Figures(TypedDict):
    steps_per_s: float
    examples_per_s: float
    step_time: float  # seconds
    wall_time: float  # seconds, first step's end to last step's end


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


def stretch(steps: "np.typing.ArrayLike", ends: "np.typing.ArrayLike") -> tuple[int, float, int, float]:
    """(first step, its end, last step, its end) of the stretch ``steps_per_s`` times over
    ``steps`` (ordered, with their ends): from the end of the batch of rows published
    with the first (``BATCH_GAP``) to the last. NaN times for no steps."""
    steps, ends = np.asarray(steps, np.int64), np.asarray(ends, float)
    if not len(steps):
        return 0, float("nan"), 0, float("nan")
    later = np.flatnonzero(ends > ends[0] + BATCH_GAP)
    start = later[0] - 1 if len(later) else len(ends) - 1  # the first batch's last row
    return int(steps[start]), float(ends[start]), int(steps[-1]), float(ends[-1])


def steps_per_s(steps: "np.typing.ArrayLike", ends: "np.typing.ArrayLike") -> float:
    """Steps done per second of wall time between the first and the last of ``steps``
    (ordered, with their ends), counted from the end of the batch of rows published with
    the first (``stretch``). NaN for fewer than two steps or no time between them."""
    first, began, last, ended = stretch(steps, ends)
    span = ended - began
    return float(last - first) / span if span > 0 else float("nan")


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


def steady_start(steps: np.ndarray) -> int:
    """The first step a run's figures count: the one a fifth of the way through its steps."""
    return int(steps[len(steps) // 5 if len(steps) > 1 else 0])


def run_figures(steps: "np.typing.ArrayLike", times: "np.typing.ArrayLike", step_times: "np.typing.ArrayLike",
                global_batch_size: int) -> Figures:
    """A whole run's figures from its rows (one per worker and step): steps/s and examples/s
    after its first fifth of steps, the median step time over the same steps, wall time."""
    steps = np.asarray(steps, dtype=np.int64)
    s, ends = step_ends(steps, times)
    if not len(s):
        nan = float("nan")
        return {"steps_per_s": nan, "examples_per_s": nan, "step_time": nan, "wall_time": nan}
    first = steady_start(s)
    keep = s >= first
    rate = steps_per_s(s[keep], ends[keep])
    return {"steps_per_s": rate, "examples_per_s": examples_per_s(rate, global_batch_size),
            "step_time": step_time(np.asarray(step_times, float)[steps >= first]),
            "wall_time": float(ends[-1] - ends[0])}


def recent_steps_per_s(steps: "np.typing.ArrayLike", times: "np.typing.ArrayLike", window: float = RECENT_S) -> float:
    """The live steps/s: ``steps_per_s`` over the steps that ended in the last ``window``
    seconds before the newest step's end (NaN for fewer than two such steps)."""
    steps, times = np.asarray(steps, dtype=np.int64), np.asarray(times, dtype=float)
    if len(times):  # a step ends at its latest row: rows older than the window end no step in it
        inside = times >= times.max() - window  # (the CLI asks 5 times a second: sort the window only)
        steps, times = steps[inside], times[inside]
    s, ends = step_ends(steps, times)
    keep = ends >= (ends[-1] - window) if len(ends) else ends.astype(bool)
    return steps_per_s(s[keep], ends[keep])


def final_loss(steps: "np.typing.ArrayLike", losses: "np.typing.ArrayLike", last: int = 10) -> float:
    """The mean over the last ``last`` steps of each step's mean loss over its rows."""
    steps = np.asarray(steps, dtype=np.int64)
    losses = np.asarray(losses, float)
    if not len(steps):
        return float("nan")
    s, inverse = np.unique(steps, return_inverse=True)
    per_step = np.bincount(inverse, weights=losses) / np.bincount(inverse)
    return float(per_step[-last:].mean())


def history_figures(history: "object", global_batch_size: int) -> Figures:
    """``run_figures`` of a ``run.history`` DataFrame (columns step, time, step_time)."""
    h = history
    step_times = h["step_time"].values if "step_time" in h else np.full(len(h), np.nan)
    return run_figures(h["step"].values, h["time"].values, step_times, global_batch_size)


def steady_stretch(history: "object") -> tuple[int, float, int, float]:
    """(first step, its end, last step, its end) of the stretch a ``run.history``'s
    steps/s counts (``history_figures``): what to measure anything else over, e.g. link
    counters, so that it covers exactly the steps the figure counts."""
    s, ends = step_ends(history["step"].values, history["time"].values)
    if not len(s):
        return stretch(s, ends)
    keep = s >= steady_start(s)
    return stretch(s[keep], ends[keep])
