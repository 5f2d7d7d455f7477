"""Hundreds of workers, simulated (no engine): the kernel's real Run and Dashboard take a
synthetic stream of step rows in the engines' format. The dashboard aggregates past a few
workers, and the kernel's cost grows linearly with the workers, measured as CPU time over
a fixed number of steps per worker (never wall-clock)."""

import random
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import simulated  # noqa: E402

from workbench.engine import metrics  # noqa: E402
from workbench.kernel.views import livestats  # noqa: E402


@pytest.fixture
def runs(tmp_path):
    made = []

    def make(workers):
        run = simulated.make_run(workers, str(tmp_path / f"run{len(made)}"))
        made.append(run)
        return run

    yield make
    for run in made:
        for r in run.results.values():
            r.finish()
        assert run.join(30), "the simulated run's watcher did not end"


class Engines:
    """``workers`` workers stepping together, each publishing engine/metrics.py's window."""

    def __init__(self, run, workers, slow=()):
        self.run, self.rng = run, random.Random(0)
        self.names = [f"worker:{i}" for i in range(workers)]
        self.rows = {n: [] for n in self.names}
        self.marks = {n: [] for n in self.names}
        self.slow = set(slow)

    def steps(self, k):
        for n in self.names:
            for _ in range(k):
                r = simulated.row(n, len(self.rows[n]) + 1, self.rng)
                if n in self.slow:
                    r["examples_per_s"] /= 4
                self.rows[n].append(r)
            window = simulated.window(self.rows[n], self.marks[n])
            self.run.log.merge({"packed": metrics.pack(window), "events": [], "n": len(self.rows[n])}, n)  # the watcher's poll


def test_many_workers_draw_a_median_band_and_name_the_slowest(runs):
    run = runs(64)
    dash = run.dashboard(interval=3600)  # redrawn here, by hand
    engines = Engines(run, 64, slow=["worker:17", "worker:40"])
    for _ in range(10):
        engines.steps(2)
        dash._redraw()
    assert dash.aggregate and not dash.loss_lines and not dash.thr_lines  # not 64 lines
    assert dash.loss_band in dash.loss_fig.marks and dash.loss_median in dash.loss_fig.marks
    lo, hi = dash.loss_band.y
    assert len(dash.loss_band.x) == 20 and (lo <= hi).all() and (lo < hi).any()
    assert len(dash.thr_median.y) == 20
    slowest = dash.thr_text.value.split("slowest: ")[1].split(" examples/s")[0]  # "worker:17 1,600, ..."
    assert {part.split()[0] for part in slowest.split(", ")[:2]} == {"worker:17", "worker:40"}, slowest
    assert "64 running" in dash._engines_text()
    assert len(run.history) == 64 * 20 and run.step == 20
    assert "workers 50%" in dash._bundle()["text/html"]  # the saved snapshot aggregates too


def test_few_workers_keep_a_line_each(runs):
    run = runs(livestats.PER_WORKER_LINES)
    dash = run.dashboard(interval=3600)
    Engines(run, livestats.PER_WORKER_LINES).steps(5)
    dash._redraw()
    assert not dash.aggregate and len(dash.loss_lines) == livestats.PER_WORKER_LINES
    assert all(len(line.x) == 5 for line in dash.loss_lines.values())
    assert dash.loss_band not in dash.loss_fig.marks


def test_each_row_is_merged_once_from_overlapping_windows(runs):
    run = runs(2)
    engines = Engines(run, 2)
    for _ in range(60):  # 60 publishes: past WINDOW_FLUSHES, the window stops growing
        engines.steps(3)
    assert len(engines.rows["worker:0"]) == 180
    assert len(simulated.window(engines.rows["worker:0"], list(engines.marks["worker:0"]))) \
        <= 3 * metrics.WINDOW_FLUSHES
    log, _ = run.rows_since(0)
    assert len(log) == 2 * 180 and len({(r["worker"], r["step"]) for r in log}) == 360
    # a replacement engine counts its rows from 0 again: its rows are taken, not skipped
    run.log.merge({"packed": metrics.pack([simulated.row("worker:0", 181, engines.rng)]), "n": 1}, "worker:0")
    assert run.step == 181 and len(run.history) == 361


def test_a_simulated_runs_stacks_read_as_engines_without_a_debug_thread(runs):
    """What the watcher reads when a synchronous run pauses (its hang check): a simulated
    engine answers as one with no debug thread, rather than ending the watcher."""
    run = runs(3)
    stacks = run.stacks(timeout=1.0)
    assert sorted(stacks) == ["worker:0", "worker:1", "worker:2"]
    assert all("no debug thread" in s.note for s in stacks.tasks.values()), stacks.table


def test_a_replaced_tasks_old_result_does_not_stand_for_its_replacements(runs):
    """A parameter-server worker replaced while the watcher collected results: the lost
    engine's result, collected after the swap, is not taken for the replacement's (whose
    placement event then never reached the run: the placement named the lost engine, seen
    once in a full run of test_faults)."""
    run = runs(2)
    old, new = run.results["worker:1"], simulated.FakeResult()
    run.watcher.swap("worker:1", new)
    old.finish()
    run.watcher._collect("worker:1", old)  # what the watcher's loop did with its list from before the swap
    assert "worker:1" not in run.watcher.outcome
    new.finish()
    run.watcher._collect("worker:1", new)
    assert "worker:1" in run.watcher.outcome


def _kernel_cpu(runs, workers, steps=40, redraw_every=2):
    """CPU seconds of this thread for the kernel's work on ``steps`` steps of ``workers``
    workers: merges (one poll per publish), a dashboard redraw every ``redraw_every``
    steps, history and placement once at the end. The rows are made beforehand."""
    run = runs(workers)
    dash = run.dashboard(interval=3600)
    engines = Engines(run, workers)
    merge, engines.run = run.log.merge, None
    publishes = []
    for n in engines.names:  # the publishes the engines would send, made outside the timing
        for k in range(steps):
            engines.rows[n].append(simulated.row(n, k + 1, engines.rng))
            publishes.append((k, n, {"packed": metrics.pack(simulated.window(engines.rows[n], engines.marks[n])),
                                    "n": k + 1}))
    publishes.sort(key=lambda p: p[0])
    start = time.thread_time()
    for i, (k, n, data) in enumerate(publishes):
        merge(data, n)
        if (i + 1) % (workers * redraw_every) == 0:
            dash._redraw()
    run.history
    run.log.merge({"events": [simulated.placement_event(variables=400)]})
    dash._redraw()
    return time.thread_time() - start


def test_kernel_cost_grows_linearly_with_workers(runs):
    """4x the workers, same steps each: 4x the rows; linear costs x4, quadratic x16."""
    _kernel_cpu(runs, 16, steps=10)  # imports and first-call costs out of the way
    small = min(_kernel_cpu(runs, 64) for _ in range(2))
    large = min(_kernel_cpu(runs, 256) for _ in range(2))
    assert large / small < 6, f"64 workers: {small:.3f} s, 256 workers: {large:.3f} s (x{large / small:.1f})"


def _reference_ema(values, smoothing):
    """The bias-corrected EMA as a loop (Adam's moments; TensorBoard's smoothing):
    non-finite values left in place and out of the average."""
    import numpy as np

    out, acc, n = np.array(values, float), 0.0, 0
    for i, v in enumerate(values):
        if np.isfinite(v):
            n += 1
            acc = smoothing * acc + (1 - smoothing) * v
            out[i] = acc / (1 - smoothing ** n)
    return out


@pytest.mark.parametrize("n", [1, 2, 127, 128, 129, 5000])
def test_the_dashboards_smoothing_is_the_reference_ema_in_blocks(n):
    """livestats.ema (a matrix product per block of 128) gives the loop's numbers,
    non-finite values included."""
    import numpy as np

    rng = np.random.default_rng(n)
    for smoothing in (0.3, 0.9, 0.99):
        for bad in (None, 0, n // 2, n - 1):
            x = rng.normal(size=n) * 3 + 2
            if bad is not None:
                x[bad] = rng.choice([np.nan, np.inf, -np.inf])
            assert np.allclose(livestats.ema(x, smoothing), _reference_ema(x, smoothing), rtol=1e-12, atol=1e-12,
                               equal_nan=True), (smoothing, bad)
