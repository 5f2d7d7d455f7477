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
    step = np.arange(1, 41)
    time = 100.0 + 0.1 * ((step - 1) // 10 + 1) + 1e-5 * ((step - 1) % 10)
    fig = figures.run_figures(step, time, np.full(40, 0.01), global_batch_size=64)
    # the steady stretch starts at step 9, inside the first chunk: counted from that chunk's
    # end (step 10), steps 11..40 took 0.3 s; from step 9 it would read 31 / 0.3 = 103
    assert fig["steps_per_s"] == pytest.approx(100.0)
    assert figures.steady_stretch(pd.DataFrame({"step": step, "time": time})) == (10, pytest.approx(100.1 + 9e-5), 40,
                                                                    pytest.approx(100.4 + 9e-5))
    one_chunk = figures.steps_per_s(step[:10], time[:10])
    assert np.isnan(one_chunk), "a single chunk measures no time between steps"


def test_a_stretch_of_fewer_than_min_ends_distinct_step_ends_is_too_short_to_measure():
    """A 40-step parameter-server run's rows as its chief used to stamp them, when it
    collected them (issue 35.7): a call of 1 step, then calls of 10; after the first fifth
    of the steps two distinct ends remain, the last one holding three calls collected at
    once. Timed between them it read 4,610 steps/s where its workers did ~260: too short
    to measure."""
    chunks = [(1, 1, 0.0), (2, 11, 0.2538), (12, 21, 0.2571), (22, 31, 0.2586), (32, 40, 0.2601)]
    step = np.concatenate([np.arange(a, b + 1) for a, b, _ in chunks])
    time = np.concatenate([t + 1e-5 * np.arange(b - a + 1) for a, b, t in chunks])
    fig = figures.run_figures(step, time, np.full(len(step), 0.008), global_batch_size=256)
    assert np.isnan(fig["steps_per_s"]) and np.isnan(fig["examples_per_s"]) and fig["step_time"] == pytest.approx(0.008)
    assert figures.distinct_ends(time[step >= 9]) == 2 < figures.MIN_ENDS
    # one call more, 0.04 s later, and the stretch holds MIN_ENDS ends: a rate
    step, time = np.r_[step, np.arange(41, 51)], np.r_[time, 0.3006 + 1e-5 * np.arange(10)]
    assert figures.distinct_ends(time[step >= 11]) == figures.MIN_ENDS
    assert figures.run_figures(step, time, np.full(len(step), 0.008), 256)["steps_per_s"] == pytest.approx(
        39 / (0.3006 + 9e-5 - 0.2538 - 9e-5))


def test_asynchronous_steps_count_by_when_they_ended_not_by_their_numbers():
    """Two parameter-server workers' calls of 10 steps overlap, and worker 1's first call
    (steps 2-11: it traces) ends after worker 0's next two: steps end out of their numbers'
    order. From 1.2 s on a call ends every 0.05 s: 79 steps in 0.4 s."""
    chunks = [(1, 1, 1.0), (12, 21, 1.1), (22, 31, 1.2), (2, 11, 1.25), (32, 41, 1.3), (42, 51, 1.35), (52, 61, 1.4),
              (62, 71, 1.45), (72, 81, 1.5), (82, 91, 1.55), (92, 100, 1.6)]
    step = np.concatenate([np.arange(a, b + 1) for a, b, _ in chunks])
    time = np.concatenate([t + 1e-5 * np.arange(b - a + 1) for a, b, t in chunks])
    fig = figures.run_figures(step, time, np.full(len(step), 0.01), global_batch_size=64)
    assert fig["steps_per_s"] == pytest.approx(79 / (1.6 + 8e-5 - 1.2 - 9e-5))  # by step number from step 21: 79 / 0.5
    assert fig["wall_time"] == pytest.approx(0.6 + 8e-5)


def async_calls(workers=3, calls=2, n=10):
    """A parameter-server run's calls (worker, start, end, steps): a first call of one step,
    then each worker runs calls of ``n`` steps back to back, 1 s each, except its first,
    which traces its function: 1 + 0.5 x its index s."""
    out = [("worker:0", 0.0, 0.1, 1)]
    for w in range(workers):
        start = 0.1
        for c in range(calls):
            span = 1.0 + 0.5 * w if c == 0 else 1.0
            out.append((f"worker:{w}", start, start + span, n))
            start += span
    return sorted(out, key=lambda c: c[2])


def async_rows(calls):
    """Those calls' rows as the chief records them: each row stamped with its call's end on
    its worker, numbered in the order of those ends, its step time the call's span / n."""
    step, time, step_time, worker, s = [], [], [], [], 0
    for name, start, end, k in calls:
        for _ in range(k):
            s += 1
            step.append(s), time.append(100.0 + end), step_time.append((end - start) / k), worker.append(name)
    return np.array(step), np.array(time), np.array(step_time), np.array(worker)


def test_asynchronous_steps_count_the_share_of_their_call_inside_the_stretch():
    """When the stretch starts, the other workers are inside calls begun before it (their
    first: traced, long); at the run's end none is left running. Counted whole, such calls
    made 60-step runs of 3 workers read x1.2-1.4 of what their PS link carried (measured
    on the bed); counted by the share of each call inside the stretch, the rate is what
    the workers did in it: here each step of a call ends at its own share of the call."""
    calls = async_calls()
    step, time, step_time, worker = async_rows(calls)
    frame = pd.DataFrame({"step": step, "time": time, "step_time": step_time, "worker": worker})
    first, began, last, ended = figures.steady_stretch(frame)  # what link counters are read over
    ends = [100.0 + a + (j + 1) * (e - a) / k for _, a, e, k in calls for j in range(k)]
    true = sum(began < x <= ended for x in ends) / (ended - began)  # the steps that ended inside it
    whole = figures.run_figures(step, time, step_time, global_batch_size=64)["steps_per_s"]  # no workers given
    fig = figures.run_figures(step, time, step_time, global_batch_size=64, workers=worker)
    assert whole > 1.3 * true, (whole, true)  # x1.43 here: a 61-step run, as on the bed
    assert fig["steps_per_s"] == pytest.approx(true, rel=0.05) and fig["examples_per_s"] == fig["steps_per_s"] * 64
    assert figures.history_figures(frame, 64)["steps_per_s"] == fig["steps_per_s"]
    assert (last - first) / (ended - began) == pytest.approx(fig["steps_per_s"])
    # one worker, or a synchronous run's rows (every step reported by each worker): as before
    def distinct(steps):
        return len(np.unique(steps))

    assert figures.asynchronous(worker, distinct(step))
    assert not figures.asynchronous(np.full(len(step), "worker:0"), distinct(step))
    # a recorded run resumed from a checkpoint holds the steps past it twice: still asynchronous
    assert figures.asynchronous(np.r_[worker, worker[:5]], distinct(np.r_[step, step[-5:]]))
    sync_step, sync_time, sync_step_time = rows()
    sync_workers = np.tile(["worker:0", "worker:1"], 100)
    assert not figures.asynchronous(sync_workers, distinct(sync_step))
    assert figures.run_figures(sync_step, sync_time, sync_step_time, 64, workers=sync_workers)["steps_per_s"] == \
        figures.run_figures(sync_step, sync_time, sync_step_time, 64)["steps_per_s"]


def test_a_resumed_run_s_figures_are_its_newest_attempt_s():
    """Issue 35.6: a run did 200 steps at 371.5 steps/s, stopped, and was resumed a minute
    later from its checkpoint at step 200 for 200 more at 213.7. Its figures are the newest
    attempt's: the minute between them is no training time."""
    first = np.arange(1, 201)
    second = np.arange(201, 401)
    step = np.r_[first, second]
    time = np.r_[1000.0 + first / 371.5, 1000.0 + 200 / 371.5 + 60.0 + (second - 200) / 213.7]
    loss = np.r_[np.full(200, 2.0), np.full(195, 1.0), np.full(5, 0.5)]
    h = pd.DataFrame({"step": step, "time": time, "step_time": np.r_[np.full(200, 1 / 371.5), np.full(200, 1 / 213.7)],
                      "loss": loss})
    fig = figures.history_figures(h, 64, first_step=201)
    assert fig["steps_per_s"] == pytest.approx(213.7) and fig["examples_per_s"] == pytest.approx(213.7 * 64)
    assert fig["step_time"] == pytest.approx(1 / 213.7) and fig["wall_time"] == pytest.approx(199 / 213.7)
    assert fig["final_loss"] == pytest.approx(0.75)
    whole = figures.history_figures(h, 64)  # the pause counted, as the panel and %wb read it: x0.02
    assert whole["steps_per_s"] < 213.7 / 10
    assert figures.final_loss(step, loss, first_step=396) == pytest.approx(0.5)  # 5 steps in that attempt
    assert figures.scope(1) == "whole run" and figures.scope(201) == "since the resume at step 200"


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


def test_links_bytes_per_step_are_read_over_the_stretch_and_each_worker_moves_its_own_steps():
    """``LinkSamples.over_stretch``: a link's counters from the end of the stretch's first step
    to the end of its last, over the steps between (asynchronous steps are numbered as the
    chief collects them: row by row they misread). ``worker_shares``: the rows each worker
    ended inside the same stretch, which its link's bytes follow under a parameter server."""
    from workbench.common.linksamples import LinkSamples

    calls = async_calls()
    step, time, step_time, worker = async_rows(calls)
    frame = pd.DataFrame({"step": step, "time": time, "step_time": step_time, "worker": worker})
    first, began, last, ended = figures.steady_stretch(frame)
    samples = LinkSamples()
    ticks = np.arange(99.0, time.max() + 1.0, 0.1)
    # p0 sends 1,000 bytes/s and receives 500; "late" is sampled only from the stretch's middle on
    samples.add([(t, host, 1000 * (t - 99), 500 * (t - 99), 10**8) for t in ticks for host in ("p0", "late")
                 if host == "p0" or t > (began + ended) / 2])
    moved = samples.over_stretch(frame)
    assert set(moved) == {"p0"}
    assert moved["p0"]["tx"] == pytest.approx(1000 * (ended - began) / (last - first), rel=1e-6)
    assert moved["p0"]["rx"] == pytest.approx(moved["p0"]["tx"] / 2)
    assert LinkSamples().over_stretch(frame) == {} and samples.over_stretch(frame.iloc[:0]) == {}
    shares = figures.worker_shares(frame)
    inside = frame[(frame.time > began) & (frame.time <= ended)]
    assert shares == {w: pytest.approx(n / len(inside)) for w, n in inside.groupby("worker").size().items()}
    assert sum(shares.values()) == pytest.approx(1.0) and len(shares) == len(set(worker))
    assert figures.worker_shares(frame.drop(columns="worker")) == {}
