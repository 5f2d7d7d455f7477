"""The one definition of each speed figure (workbench/common/figures.py), on rows whose
answer is known by hand."""

import numpy as np
import pandas as pd
import pytest

from workbench.common import figures


def rows(pause_at=None, pause=0.0, workers=2, steps=100, dt=0.01):
    """A synchronous run: every ``dt`` s a step ends on each worker (the second a little
    later); after ``pause_at`` a pause of ``pause`` s (a checkpoint) delays every later step."""
    step, time, step_time = [], [], []
    for s in range(1, steps + 1):
        end = 100.0 + s * dt + (pause if pause_at is not None and s > pause_at else 0.0)
        for w in range(workers):
            step.append(s), time.append(end + w * 0.001), step_time.append(dt)
    return np.array(step), np.array(time), np.array(step_time)


def test_a_run_s_figures_count_from_its_first_fifth_and_its_pauses_are_slow_steps():
    plain = figures.run_figures(*rows(), global_batch_size=64)
    # steps 21..100 end 0.01 s apart: 100 steps/s, 6,400 examples/s
    assert plain["steps_per_s"] == pytest.approx(100.0) and plain["examples_per_s"] == pytest.approx(6400.0)
    assert plain["step_time"] == pytest.approx(0.01) and plain["wall_time"] == pytest.approx(0.99)
    paused = figures.run_figures(*rows(pause_at=50, pause=0.8), global_batch_size=64)
    # the 0.8 s checkpoint lies inside the counted steps: 79 steps in 0.79 + 0.8 s
    assert paused["steps_per_s"] == pytest.approx(79 / 1.59)
    assert paused["examples_per_s"] == pytest.approx(79 / 1.59 * 64)
    assert figures.scaling_efficiency(paused["examples_per_s"], 2, 6400.0) == pytest.approx(79 / 1.59 * 64 / 12800)


def test_steps_reported_together_count_from_their_chunks_end():
    # chunks of 10 steps end every 0.1 s (100 steps/s); a chunk's rows are published 10 us apart
    step = np.arange(1, 31)
    time = 100.0 + 0.1 * ((step - 1) // 10 + 1) + 1e-5 * ((step - 1) % 10)
    fig = figures.run_figures(step, time, np.full(30, 0.01), global_batch_size=64)
    # the steady stretch starts at step 7, inside the first chunk: counted from that chunk's
    # end (step 10), steps 11..30 took 0.2 s; from step 7 it would read 23 / 0.2 = 115
    assert fig["steps_per_s"] == pytest.approx(100.0)
    assert figures.steady_stretch(pd.DataFrame({"step": step, "time": time})) == (10, pytest.approx(100.1 + 9e-5), 30,
                                                                    pytest.approx(100.3 + 9e-5))
    one_chunk = figures.steps_per_s(step[:10], time[:10])
    assert np.isnan(one_chunk), "a single chunk measures no time between steps"


def test_a_step_ends_when_its_last_worker_reports_it_in_any_row_order():
    step, time, _ = rows(steps=5)
    order = np.random.default_rng(0).permutation(len(step))
    s, ends = figures.step_ends(step[order], time[order])
    assert s.tolist() == [1, 2, 3, 4, 5] and ends == pytest.approx(100.0 + 0.01 * s + 0.001)


def test_too_few_steps_give_nan_not_a_number_made_up():
    one = figures.run_figures([1, 1], [5.0, 5.1], [0.1, 0.1], 32)
    assert np.isnan(one["steps_per_s"]) and np.isnan(one["examples_per_s"]) and one["step_time"] == pytest.approx(0.1)
    empty = figures.run_figures([], [], [], 32)
    assert np.isnan(empty["wall_time"]) and np.isnan(figures.step_time([np.nan]))


def test_the_final_loss_is_the_mean_of_the_last_steps_losses_whatever_the_workers():
    # 2 workers at steps 1..20 (loss = step, and step + 1 on the second): steps 11..20 average 16
    steps = np.repeat(np.arange(1, 21), 2)
    losses = steps + np.tile([0.0, 1.0], 20)
    assert figures.final_loss(steps, losses) == pytest.approx(16.0)
    assert figures.final_loss(steps[::2], losses[::2]) == pytest.approx(15.5)  # one worker


def test_the_live_steps_per_second_count_only_the_steps_that_ended_in_the_window():
    # 10 steps/s for 10 s, then 2 steps/s for the last 5 s; two workers report every step
    times = np.r_[np.arange(1, 101) * 0.1, 10 + np.arange(1, 11) * 0.5]
    steps = np.arange(1, 111)
    rows_steps, rows_times = np.r_[steps, steps], np.r_[times, times - 0.01]
    assert figures.recent_steps_per_s(rows_steps, rows_times, window=5.0) == pytest.approx(2.0)
    assert figures.recent_steps_per_s(rows_steps, rows_times, window=60.0) == pytest.approx(109 / 14.9)
    assert np.isnan(figures.recent_steps_per_s([], []))
    assert np.isnan(figures.recent_steps_per_s([3, 3], [1.0, 1.5]))
