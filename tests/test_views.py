"""What the views (dashboard, its snapshot, wb.compare) show of a run, from rows whose
answer is known by hand: recorded runs read from their files, no cluster."""

import numpy as np
import pytest

from checks import recorded_run
from workbench.kernel.runs.recorded import RecordedRun
from workbench.kernel.views import compare, livestats, render


def _rows(steps=100, rate=195.4267, noise=0.03, anatomy=None, seed=0):
    """A 2-worker synchronous run: a step every 1 / ``rate`` s; each worker's loss a
    falling curve plus its own batch's noise."""
    rng = np.random.default_rng(seed)
    return [{"step": s, "worker": w, "loss": 2.0 * np.exp(-s / 30) + 0.3 + noise * rng.normal(), "accuracy": 0.5,
             "step_time": 1 / 307, "examples_per_s": 32 * 307, "replicas": 1, "time": 1000.0 + s / rate + 1e-4 * i,
             **(anatomy(s) if anatomy else {})}
            for s in range(1, steps + 1) for i, w in enumerate(("worker:0", "worker:1"))]


def test_the_global_loss_curve_runs_through_the_workers_curves_on_a_short_run(tmp_path):
    """Issue 35.8: on a 100-step run the "global (smoothed)" curve sat above both workers'
    curves for most of the run: a one-way average lags a falling loss by smoothing /
    (1 - smoothing) steps. Drawn both ways, bias-corrected, it goes through the middle of
    the workers' curves, above or below both only where their own noise puts both on one
    side; wb.compare and the dashboard's snapshot draw that same curve."""
    run = RecordedRun(recorded_run(tmp_path, _rows(), {"final_step": 100}))
    h = run.history
    workers = h.pivot(index="step", columns="worker", values="loss")
    glob = h.groupby("step").loss.mean()
    [(label, x, curve)] = compare.Comparison([run], ["run"])._curves("step")
    above, below = (curve > workers.max(axis=1).values).mean(), (curve < workers.min(axis=1).values).mean()
    assert above < 1 / 3 and below < 1 / 3, (above, below)  # a one-way average at 0.6: above 0.54
    np.testing.assert_array_equal(curve, livestats.smoothed(glob.values, livestats.SMOOTHING))
    series = [(w, g.step.values, g.loss.values) for w, g in h.groupby("worker")]
    series.append(("global (smoothed)", glob.index.values, curve))
    assert render.svg_img(render.line_chart(series, "Loss", "step", "loss"), "loss chart") in run.dashboard()._repr_html_()


def test_the_speed_figures_say_what_each_is_and_when_a_run_is_too_short():
    """Issue 35.9: a header read "195.4 steps/s" beside "step time 3.26 ms" (307 a second):
    steps/s counts wall time, a worker's step time does not; each says so. Issue 35.7: a
    NaN rate (too few distinct step ends) is said to be too short to measure, never printed."""
    shown = " · ".join(render.figures_text({"steps_per_s": 195.4267, "examples_per_s": 12507.3, "step_time": 0.00326},
                                            "whole run"))
    assert "whole run: <b>12,507</b> examples/s" in shown and "195.4 steps/s (wall clock)" in shown
    assert "step time 3.26 ms (median, as a worker timed it)" in shown
    assert "1 / step time is not steps/s" in shown  # the tooltip
    short = " · ".join(render.figures_text({"steps_per_s": np.nan, "examples_per_s": np.nan, "step_time": 0.009},
                                            "last 5 s"))
    assert "last 5 s: steps/s too short to measure" in short and "nan" not in short and "9.00 ms" in short


def test_the_inside_a_step_bar_waits_for_steps_past_the_traced_calls(tmp_path):
    """Issue 35.9: while only the first calls had reported (the ones that trace; the default
    skip), the live bar showed them as the run's step: 246.84 ms/step, mostly "other", in
    a run doing 3. It shows nothing until a later step has come."""
    def timed(s):
        wall = 0.24684 if s <= 10 else 0.003
        return {"step_time": wall, "input_time": 1e-4, "compute_time": 0.002, "comm_time": 5e-4, "comm_bytes": 1000}

    traced = [r for r in _rows(anatomy=timed) if r["step"] <= 20]
    run = RecordedRun(recorded_run(tmp_path, traced, steps_per_execution=10))  # skip: 2 calls of 10
    assert run.anatomy().empty and render.inside_step_html(run) == ""
    later = RecordedRun(recorded_run(tmp_path, _rows(steps=30, anatomy=timed), run_id="later", steps_per_execution=10))
    assert "3.00 ms/step" in render.inside_step_html(later)


def test_compare_s_table_shows_each_number_to_its_digits_under_one_header_row(tmp_path):
    """Issue 36.10: wb.compare's table printed raw floats (195.4267 steps/s) under two
    header rows, the second one empty but for the index's name."""
    run = RecordedRun(recorded_run(tmp_path, _rows(), {"final_step": 100}))
    table = compare.Comparison([run], ["two workers"])
    assert table.table.loc["two workers", "steps/s"] == pytest.approx(195.4267)  # the numbers stay
    html = table.static_html()
    head = html[html.index("<thead>"):html.index("</thead>")]
    assert head.count("<tr") == 1 and "<th>run</th>" in head, head
    assert "<td>195.4</td>" in html and "<td>12,507</td>" in html and "195.4267" not in html
    text = table.shown().to_string(index=False)
    assert "195.4" in text and "195.43" not in text and "two workers" in text


def test_tick_labels_keep_the_decimals_their_ticks_need():
    """Issue 36.10: bqplot's own format labelled ticks 2.5, 7.5 and 12.5 as 3, 8 and 13."""
    import bqplot as bq

    axis = bq.Axis(scale=bq.LinearScale())
    render.set_ticks(axis, 0.0, 12.5)
    assert list(axis.tick_values) == [0, 2.5, 5, 7.5, 10, 12.5]
    assert [format(t, axis.tick_format) for t in axis.tick_values] == ["0.0", "2.5", "5.0", "7.5", "10.0", "12.5"]
    render.set_ticks(axis, 0.0, 3000.0)
    assert axis.tick_format == ",.0f"
    throughput = bq.Axis(scale=bq.LinearScale(), tick_format=render.THROUGHPUT_FORMAT)
    render.set_ticks(throughput, 0.0, 30000.0)
    assert throughput.tick_format == render.THROUGHPUT_FORMAT  # its own format is kept


def test_predicted_vs_measured_draws_each_pair_and_its_ratio_and_names_bad_input():
    """wb.predicted_vs_measured: a grey predicted bar beside each measured one (scaled as
    asked), measured / predicted above each measured bar from the values themselves, no
    bar where nothing was measured; bad input names its argument and entry."""
    import matplotlib

    matplotlib.use("Agg")
    import workbench as wb

    ax = wb.predicted_vs_measured(["fp32", "fp16", "int8"], [400e3, 200e3, 110e3], [404e3, None, 99e3], scale=1e3,
                                  ylabel="KB per step")
    predicted, measured = ax.containers
    assert [round(b.get_height(), 6) for b in predicted] == [400, 200, 110]
    assert [round(b.get_height(), 6) for b in measured] == [404, 99]
    assert [t.get_text() for t in ax.texts] == ["1.01", "0.90"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["fp32", "fp16", "int8"]
    matplotlib.pyplot.close(ax.figure)
    with pytest.raises(wb.ConfigError, match=r"'predicted'.*2 values, one per label \(3 given\)"):
        wb.predicted_vs_measured(["a", "b"], [1, 2, 3], [1, 2])
    with pytest.raises(wb.ConfigError, match=r"'measured'.*entry 1, for 'b', is 'x'"):
        wb.predicted_vs_measured(["a", "b"], [1, 2], [1, "x"])
    with pytest.raises(wb.ConfigError, match=r"'labels'.*Received: labels='ab'"):
        wb.predicted_vs_measured("ab", [1, 2], [1, 2])
    with pytest.raises(wb.ConfigError, match=r"'scale'.*Received: scale=0"):
        wb.predicted_vs_measured(["a"], [1], [1], scale=0)
