"""What the live dashboard draws, kept up to date from the rows that arrived since its last
update: the cost of an update grows with the rows that are new and the steps on screen,
never with the rows the run has made so far, nor with workers x rows.

Up to ``PER_WORKER_LINES`` workers the dashboard draws one line per worker; past that, a
chart of 256 lines is unreadable and costs 256 marks per update, so it draws the median
across workers of each step with a spread band (10th-90th percentile) and names the
slowest workers instead.
"""

import functools
import warnings
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from workbench.common import figures
from workbench.common.protocols import StepRow

if TYPE_CHECKING:
    import pandas as pd

PER_WORKER_LINES = 8  # one colour each (render.COLORS); more workers: aggregate + band
RECENT_S = figures.RECENT_S  # the throughput text's window
SMOOTHING = 0.9  # the loss curves' default smoothing (the dashboard's slider, its snapshot, wb.compare)
MIN_WINDOWS = 20  # a smoothed curve holds at least this many smoothing windows (``smoothed``)
PER_WORKER_RECENT = 9  # rows per worker its recent examples/s is the median of
RECENT_SAMPLE = 4096  # newest rows (any worker) the step time and user metrics are taken over


class LiveStats:
    def __init__(self, per_worker: bool = True) -> None:
        self.per_worker = per_worker
        self.cursor = 0  # rows of the run's arrival log consumed so far
        self.rows = 0
        self.series = {}  # worker -> lists (step, elapsed, loss, examples/s), per-worker mode only
        self._steps = {}  # step -> [losses], [examples/s], max elapsed
        self._dirty = set()  # steps whose summary must be recomputed
        self._summary = {}  # step -> (loss median, p10, p90, mean, examples/s median, p10, p90, elapsed)
        self._eps = {}  # worker -> deque of (time, examples/s) of its newest rows
        self._ends = {}  # step -> its end (latest row), for the steps of the last RECENT_S seconds, oldest first
        self._sample = deque(maxlen=RECENT_SAMPLE)  # (time, row) of the newest rows, any worker
        self.newest = 0.0  # the newest row's time
        self.max_step = 0
        self.max_elapsed = 0.0

    def add(self, rows: Sequence[StepRow], started: float) -> None:
        """Take ``rows`` (step rows in the run's format) into the aggregates."""
        for r in rows:
            step, t = r["step"], r["time"]
            elapsed = t - started
            loss = r.get("loss")
            loss = float("nan") if loss is None else loss
            eps = r.get("examples_per_s", float("nan"))
            s = self._steps.get(step)
            if s is None:
                s = self._steps[step] = [[], [], elapsed]
            s[0].append(loss)
            s[1].append(eps)
            if elapsed > s[2]:
                s[2] = elapsed
            self._dirty.add(step)
            if self.per_worker:
                w = self.series.get(r["worker"])
                if w is None:
                    w = self.series[r["worker"]] = ([], [], [], [])
                w[0].append(step), w[1].append(elapsed), w[2].append(loss), w[3].append(eps)
            q = self._eps.get(r["worker"])
            if q is None:
                q = self._eps[r["worker"]] = deque(maxlen=PER_WORKER_RECENT)
            q.append((t, eps))
            self._sample.append((t, r))
            if t > self._ends.get(step, -np.inf):
                self._ends[step] = t
            if t > self.newest:
                self.newest = t
            if step > self.max_step:
                self.max_step = step
            if elapsed > self.max_elapsed:
                self.max_elapsed = elapsed
        self.rows += len(rows)

    def by_step(self) -> dict[str, np.ndarray]:
        """Arrays over the steps seen, in step order: step, elapsed (max over workers), loss
        mean, median, 10th and 90th percentile, examples/s median, 10th, 90th percentile."""
        groups = {}  # steps by how many rows they have (usually one per worker): one numpy call per group
        for step in self._dirty:
            groups.setdefault(len(self._steps[step][0]), []).append(step)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a step whose values are all NaN: NaN
            for steps in groups.values():
                lo = np.array([self._steps[s][0] for s in steps], float)
                ex = np.array([self._steps[s][1] for s in steps], float)
                lq, eq = _percentiles(lo), _percentiles(ex)
                mean = np.nanmean(lo, axis=1)
                mean[~np.isfinite(lo).any(axis=1)] = np.nan
                for i, step in enumerate(steps):
                    self._summary[step] = (self._steps[step][2], mean[i], *lq[:, i], *eq[:, i])
        self._dirty.clear()
        steps = np.fromiter(sorted(self._summary), float, len(self._summary))
        table = np.array([self._summary[int(s)] for s in steps], float).reshape(len(steps), 8)
        names = ("elapsed", "loss_mean", "loss_median", "loss_p10", "loss_p90", "eps_median", "eps_p10", "eps_p90")
        out = {"step": steps}
        out.update({n: table[:, i] for i, n in enumerate(names)})
        return out

    def worker_arrays(self, worker: str) -> tuple[np.ndarray, ...]:
        """(step, elapsed, loss, examples/s) of one worker, per-worker mode."""
        return tuple(np.asarray(a, float) for a in self.series.get(worker, ([], [], [], [])))

    def recent(self, metric_names: Iterable[str] = ()) -> dict[str, Any] | None:
        """The last RECENT_S seconds: per-worker median examples/s (over its last
        ``PER_WORKER_RECENT`` rows), steps/s and step time (``common/figures.py``'s
        definitions over the steps that ended in the window), the mean of each user metric,
        and the workers from slowest to fastest. O(workers + a bounded sample)."""
        if not self._ends:
            return None
        horizon = self.newest - RECENT_S
        medians = {}
        for w, values in self._eps.items():
            while values and values[0][0] < horizon:
                values.popleft()
            if values:
                ordered = sorted(v for _, v in values)
                medians[w] = ordered[len(ordered) // 2]
        while len(self._sample) > 1 and self._sample[0][0] < horizon:
            self._sample.popleft()
        stale = []  # steps first seen oldest first: those before the window's first step
        for step, end in self._ends.items():
            if end >= horizon:
                break
            stale.append(step)
        for step in stale:
            del self._ends[step]
        steps = np.fromiter(self._ends, float, len(self._ends))
        ends = np.fromiter(self._ends.values(), float, len(self._ends))
        inside = ends >= horizon  # (asynchronous steps end a little out of their order)
        step_times = [r.get("step_time", np.nan) for _, r in self._sample]
        metrics = {}
        for n in metric_names:
            values = [r[n] for _, r in self._sample if n in r]
            if values:
                metrics[n] = float(np.mean(values))
        return {
            "examples_per_s": medians,
            "steps_per_s": figures.steps_per_s(steps[inside], ends[inside]),
            "step_time": figures.step_time(step_times),
            "metrics": metrics,
            "slowest": sorted(medians, key=medians.get),
        }


def _percentiles(values: np.ndarray) -> np.ndarray:
    """Median, 10th and 90th percentile of each row, NaN left out; NaN for a row with no
    finite value. (numpy's nanpercentile loops over rows in Python: rows without NaN, nearly
    all of them, go through percentile's vectorized path, the same numbers.)"""
    out = np.full((3, len(values)), np.nan)
    finite = np.isfinite(values)
    clean = finite.all(axis=1)
    if clean.any():
        out[:, clean] = np.percentile(values[clean], (50, 10, 90), axis=1)
    for i in np.flatnonzero(~clean & finite.any(axis=1)):
        out[:, i] = np.nanpercentile(values[i], (50, 10, 90))
    return out


@functools.lru_cache(maxsize=8)
def _ema_weights(smoothing: float, block: int) -> tuple[np.ndarray, np.ndarray]:
    """``ema``'s block matrix and carry powers, built once per smoothing (read-only)."""
    k = np.arange(block)
    weights = np.tril((1 - smoothing) * smoothing ** np.abs(k[:, None] - k[None, :]).astype(float))
    carry = smoothing ** (k + 1.0)
    weights.setflags(write=False)
    carry.setflags(write=False)
    return weights, carry


def ema(values: ArrayLike, smoothing: float, block: int = 128) -> np.ndarray:
    """The exponential moving average of ``values`` (``smoothing``: 0 none, 0.99 very
    smooth), bias-corrected as Adam corrects its moments: the average starts at 0 and is
    divided by 1 - smoothing^(n + 1) after n + 1 values, so that its start is the mean of
    the first values, not the first value alone weighted as all the values before it.
    Non-finite values are left where they are and
    out of the average. Vectorized, ``block`` values at a time as a matrix product (scipy's
    lfilter did this, but importing scipy.signal took 0.45 s of the kernel's CPU at a live
    run's first draw): within a block, m[k] = s^(k+1) m[-1] + (1 - s) sum_j<=k s^(k-j) x[j];
    powers of s stay >= s^block."""
    values = np.asarray(values, float)
    out = values.copy()
    finite = np.isfinite(values)
    x = values[finite]
    if not len(x) or smoothing <= 0:
        return out
    raw = np.empty_like(x)
    acc = 0.0
    weights, carry = _ema_weights(float(smoothing), block)
    for start in range(0, len(x), block):
        piece = x[start:start + block]
        n = len(piece)
        raw[start:start + n] = weights[:n, :n] @ piece + carry[:n] * acc
        acc = raw[start + n - 1]
    out[finite] = raw / -np.expm1(np.log(smoothing) * np.arange(1.0, len(x) + 1))  # / (1 - s^(i+1))
    return out


def smoothed(values: ArrayLike, smoothing: float = SMOOTHING) -> np.ndarray:
    """A loss curve as the dashboard, its snapshot and ``wb.compare`` draw it: ``ema`` run
    forward and then backward, so that the curve does not lag. A one-way average of a
    falling loss lags it by smoothing / (1 - smoothing) steps (9 at 0.9) and sat above both
    workers' curves on 98% of a 100-step run's steps, bias-corrected or not; both ways, 32%
    (and below both on 47%: the two ends). The window 1 / (1 - smoothing) is also kept to
    at most 1 / ``MIN_WINDOWS`` of the points, so that a short run's ends are not flattened
    (100 steps: smoothing at most 0.8; above both workers 21%, below both 22%, as the
    workers' own noise puts a curve through their middle)."""
    values = np.asarray(values, float)
    s = min(float(smoothing), 1.0 - MIN_WINDOWS / max(len(values), 1))
    if s <= 0:
        return values.copy()
    return ema(ema(values, s)[::-1], s)[::-1]


def per_worker(h: "pd.DataFrame", column: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """A static chart's lines of ``column`` of ``history`` ``h`` against the step: one per
    worker, or past ``PER_WORKER_LINES`` workers their median and its 10-90% spread."""
    if h.worker.nunique() <= PER_WORKER_LINES:
        return [(w, g.step.values, g[column].values) for w, g in h.groupby("worker")]
    q = h.groupby("step")[column].quantile([0.1, 0.5, 0.9]).unstack()
    return [(f"workers {int(p * 100)}%", q.index.values, q[p].values) for p in (0.1, 0.5, 0.9)]
