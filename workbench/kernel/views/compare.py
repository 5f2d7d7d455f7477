"""``wb.compare(run_a, run_b, ...)``: loss against step and against wall time for several
runs on one chart each, and their throughput in one table: the view for choosing a
strategy."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.common import figures
from workbench.kernel.views import checks, livestats, render
from workbench.kernel.views.dashboard import MIME_WIDGET

if TYPE_CHECKING:
    import ipywidgets
    import pandas as pd

    from workbench.kernel.runs.handle import Run


# how the table shows each column (``Comparison.table`` keeps the numbers): a NaN rate was too short to measure
FORMATS = {"final loss": "{:.4f}", "steps/s": "{:,.1f}", "examples/s": "{:,.0f}", "step time (ms)": "{:.2f}",
           "wall time (s)": "{:,.1f}"}


def summary(run: Run, label: str) -> dict[str, Any]:
    h = run.history
    row = {"run": label, "strategy": run.job.strategy, "workers": run.job.workers, "ps": run.job.ps,
           "global batch": run.job.global_batch_size, "steps": run.final_step}
    if len(h):  # the one definition of each, over the run's newest attempt
        fig = figures.history_figures(h, run.job.global_batch_size, run.job.first_step)
        row.update({"final loss": fig["final_loss"], "steps/s": fig["steps_per_s"], "examples/s": fig["examples_per_s"],
                    "step time (ms)": fig["step_time"] * 1000, "wall time (s)": fig["wall_time"]})
    for name, value in (run.evaluation or {}).items():
        if name.startswith("test_") and name != "test_loss":
            row[name.replace("_", " ")] = value
    return row


class Comparison:
    def __init__(self, runs: Iterable[Run], labels: Sequence[str] | None = None) -> None:
        import pandas as pd

        self.runs = list(runs)
        self.labels = list(labels) if labels else [f"{r.job.strategy} w{r.job.workers}" +
                                                    (f" ps{r.job.ps}" if r.job.ps else "") for r in self.runs]
        if len(self.labels) != len(self.runs):
            from workbench.errors import invalid

            raise invalid("labels", labels, f"one label per run ({len(self.runs)})")
        self.table = pd.DataFrame([summary(r, l) for r, l in zip(self.runs, self.labels)]).set_index("run")
        self._widget = None

    def _curves(self, x):
        out = []
        for run, label in zip(self.runs, self.labels):
            h = run.history
            if not len(h):
                continue
            glob = h.groupby("step").agg(loss=("loss", "mean"), elapsed=("elapsed", "max"))
            xs = glob.index.values if x == "step" else glob.elapsed.values
            out.append((label, xs, livestats.smoothed(glob.loss.values)))  # as the dashboard draws it
        return out

    def shown(self) -> pd.DataFrame:
        """The table as it is shown: a header row of column names with the runs' labels as
        a column of their own, each number to the digits it has (``FORMATS``; other floats
        to 4 significant digits), a rate too short to measure said so."""
        def cell(column, value):
            if isinstance(value, float):
                if value != value:
                    return figures.TOO_SHORT if column in ("steps/s", "examples/s") else ""
                return FORMATS.get(column, "{:.4g}").format(value)
            return value

        table = self.table.reset_index()
        return table.apply(lambda col: col.map(lambda v: cell(col.name, v)))

    @property
    def widget(self) -> ipywidgets.VBox:
        if self._widget is None:
            import bqplot as bq
            import ipywidgets as W

            figs = []
            for x, xlabel in (("step", "step"), ("time", "wall time (s)")):
                xs, ys = bq.LinearScale(), bq.LinearScale()
                marks = []
                for i, (label, cx, cy) in enumerate(self._curves(x)):
                    idx = render.thin(len(cx))
                    marks.append(bq.Lines(x=cx[idx].astype(float), y=cy[idx], scales={"x": xs, "y": ys},
                                          colors=[render.COLORS[i % len(render.COLORS)]], labels=[label],
                                          display_legend=True))
                legend = render.legend_html(render.legend_outside(marks), "wb-compare-legend")
                fig = bq.Figure(marks=marks, title=f"Loss against {xlabel}",
                                axes=[bq.Axis(scale=xs, label=xlabel), bq.Axis(scale=ys, side="left", label="loss")],
                                layout=W.Layout(width="480px", height="300px"))
                if marks:  # a few round ticks at any length
                    render.set_ticks(fig.axes[0], min(m.x.min() for m in marks), max(m.x.max() for m in marks))
                    render.set_ticks(fig.axes[1], min(np.nanmin(m.y) for m in marks), max(np.nanmax(m.y) for m in marks),
                                     render.Y_TICKS)
                fig.add_class("wb-compare-chart")
                figs.append(W.VBox([fig, W.HTML(legend)]))  # the legend under the chart: never clipped
            self._widget = W.VBox([W.HBox(figs), W.HTML(self.shown().to_html(index=False))])
            self._widget.add_class("wb-compare")
        return self._widget

    @property
    def check(self) -> str:
        """What a notebook test compares of the comparison: each run's ``checks.check_line``
        (its speeds and timings are measured anew on every execution)."""
        return "workbench comparison: " + "; ".join(f"{label} = {checks.check_line(run)}"
                                                    for run, label in zip(self.runs, self.labels))

    def static_html(self) -> str:
        charts = "".join(render.svg_img(render.line_chart(self._curves(x), f"Loss against {label}", label,
                                                          "loss (smoothed)"), f"loss against {label}")
                         for x, label in (("step", "step"), ("time", "wall time (s)")))
        return (f'<div data-wb-check="{html.escape(self.check)}" style="font:12px sans-serif">'
                f'<div style="display:flex;gap:8px">{charts}</div>{self.shown().to_html(index=False)}</div>')

    def _repr_mimebundle_(self, include=None, exclude=None):
        # the text's first line names the runs; the table under it is what a terminal shows
        return {MIME_WIDGET: {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id},
                "text/html": self.static_html(),
                "text/plain": f"<workbench comparison: {', '.join(self.labels)}>\n"
                              + self.shown().to_string(index=False)}


def compare(*runs: Run, labels: Sequence[str] | None = None) -> Comparison:
    """Overlay the loss of ``runs`` against step and against wall time, and tabulate their
    throughput (steps/s, examples/s), final loss and test accuracy. ``.table`` is the
    DataFrame; in a notebook the result shows as charts."""
    from workbench.errors import invalid
    from workbench.kernel.runs.handle import Run

    if not runs or not all(isinstance(r, Run) for r in runs):
        raise invalid("runs", [type(r).__name__ for r in runs], "one or more workbench Run objects")
    return Comparison(runs, labels)
