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
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from workbench.common.protocols import StepRow

from workbench.common import figures

PER_WORKER_LINES = 8  # one colour each (render.COLORS); more workers: aggregate + band
RECENT_S = figures.RECENT_S  # the throughput text's window
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
        self._progress = deque()  # (time, step) each time the highest step grew
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
            if t > self.newest:
                self.newest = t
            if step > self.max_step:
                self.max_step = step
                self._progress.append((t, step))
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
        if not self._progress:
            return None
        horizon = self.newest - RECENT_S
        medians = {}
        for w, values in self._eps.items():
            while values and values[0][0] < horizon:
                values.popleft()
            if values:
                ordered = sorted(v for _, v in values)
                medians[w] = ordered[len(ordered) // 2]
        for q in (self._progress, self._sample):
            while len(q) > 1 and q[0][0] < horizon:
                q.popleft()
        ends, steps = zip(*(self._progress[0], self._progress[-1]))
        step_times = [r.get("step_time", np.nan) for _, r in self._sample]
        metrics = {}
        for n in metric_names:
            values = [r[n] for _, r in self._sample if n in r]
            if values:
                metrics[n] = float(np.mean(values))
        return {
            "examples_per_s": medians,
            "steps_per_s": figures.steps_per_s(steps, ends),
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
    """render.ema, vectorized: the same numbers (to float64 rounding), ``block`` values at a
    time as a matrix product. (scipy's lfilter did this, but importing scipy.signal took
    0.45 s of the kernel's CPU at a live run's first draw.) Within a block,
    y[k] = s^(k+1) y[-1] + (1 - s) sum_j<=k s^(k-j) x[j]; powers of s stay >= s^block."""
    values = np.asarray(values, float)
    if not len(values) or smoothing <= 0:
        return values.copy()
    out = np.empty_like(values)
    out[0] = acc = values[0]
    bad = np.flatnonzero(~np.isfinite(values))
    end = bad[0] if len(bad) else len(values)  # from a NaN or inf on: the loop, as render.ema
    weights, carry = _ema_weights(float(smoothing), block)
    for start in range(1, end, block):
        x = values[start:min(start + block, end)]
        n = len(x)
        y = weights[:n, :n] @ x + carry[:n] * acc
        out[start:start + n] = y
        acc = y[-1]
    for i in range(max(end, 1), len(values)):
        acc = out[i] = smoothing * acc + (1 - smoothing) * values[i]
    return out
