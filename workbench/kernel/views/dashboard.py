"""The live training dashboard: ipywidgets + bqplot, fed only by a run's metrics stream.

A thread in the kernel redraws it every ``interval`` seconds (4 Hz by default): marks are
updated together under ``hold_sync`` with downsampled arrays, so a long run sends a few
kilobytes per update and the kernel stays free for other cells. What the thread prints
lands in the cell that started the run (``runs/watcher.py``: ``enter_cell``). When the run
ends, the cell's output keeps a static HTML rendering beside the widget, for saved
notebooks; a cell that waits for the run (``Run.wait``) ends with that rendering as its own
output (``finish``).
"""

import html
import threading
import time
from typing import Any

import numpy as np

from workbench.common import figures, rates
from workbench.kernel.runs.watcher import current_cell, enter_cell, leave_cell
from workbench.kernel.views import fault_controls
from workbench.kernel.views import livestats
from workbench.kernel.views import logs
from workbench.kernel.views import render
from workbench.kernel.views import stacks_view
from workbench.store import RunDir

MIME_WIDGET = "application/vnd.jupyter.widget-view+json"


# one colour per task state (Run.task_states): red only for a real loss or failure
STATE_COLORS = {"starting": "#888", "running": "#27c", "serving": "#27c", "done": "#2a2", "stopped": "#2a2",
                "recycled": "#2a2", "replaced": "#c80", "failed": "#b00", "lost": "#b00"}


class Dashboard:
    def __init__(self, run: Any, interval: float = 0.25, smoothing: float = livestats.SMOOTHING,
                 baseline: Any = None) -> None:
        import bqplot as bq
        import ipywidgets as W

        self.run = run
        self.interval = interval
        self.smoothing = smoothing
        self.baseline = baseline  # examples/s of one worker alone (a number or a finished Run)
        self.workers = _row_writers(run)
        self.updates = 0
        self._display_id = None
        self._finished = False  # a cell that waited for the run shows its final rendering (``finish``)
        self._cell = current_cell()  # the cell that started it: where its thread's output goes
        self._stopping = False
        self._placement_key = (None, None, 0.0)  # (tasks, links' use, monotonic time) it last drew
        self._placement_rows = (-1, ([], []))  # (events, placement's task and variable rows)
        self._newest = 0.0
        self.latencies = []  # seconds from the newest step's end on an engine to this update

        # many workers: one median line and a 10-90% band instead of a line each (livestats.py)
        self.aggregate = len(self.workers) > livestats.PER_WORKER_LINES
        self.stats = livestats.LiveStats(per_worker=not self.aggregate)
        self._base = None
        self._redrawing = threading.Lock()  # the update thread and widget callbacks both redraw

        # -- loss ---------------------------------------------------------------------
        self.x_scale, self.loss_scale = bq.LinearScale(), bq.LinearScale()
        self.acc_scale = bq.LinearScale(min=0.0, max=1.0)
        colors = render.COLORS
        self.loss_lines = {} if self.aggregate else {
            w: bq.Lines(x=[], y=[], scales={"x": self.x_scale, "y": self.loss_scale},
                        colors=[colors[i % len(colors)]], labels=[w], display_legend=True, stroke_width=1,
                        opacities=[0.6])
            for i, w in enumerate(self.workers)
        }
        spread = f"{len(self.workers)} workers: 10-90%"
        self.loss_band = bq.Lines(x=[], y=[[], []], scales={"x": self.x_scale, "y": self.loss_scale},
                                  colors=["#1f77b4", "#1f77b4"], fill="between", fill_colors=["#1f77b4"],
                                  fill_opacities=[0.2], opacities=[0.3, 0.3], stroke_width=0.5,
                                  labels=[spread, ""], display_legend=self.aggregate)
        self.loss_median = bq.Lines(x=[], y=[], scales={"x": self.x_scale, "y": self.loss_scale},
                                    colors=["#1f77b4"], labels=["median of workers"], display_legend=True,
                                    stroke_width=1)
        self.global_line = bq.Lines(x=[], y=[], scales={"x": self.x_scale, "y": self.loss_scale},
                                    colors=["black"], labels=["global (smoothed)"], display_legend=True,
                                    stroke_width=2.5)
        self.acc_points = bq.Scatter(x=[], y=[], scales={"x": self.x_scale, "y": self.acc_scale},
                                     colors=["#d62728"], default_size=40, labels=["test accuracy"],
                                     display_legend=True)
        self.x_axis = bq.Axis(scale=self.x_scale, label="step")
        self.loss_fig = bq.Figure(
            marks=[*self.loss_lines.values(), *([self.loss_band, self.loss_median] if self.aggregate else []),
                   self.global_line, self.acc_points],
            axes=[self.x_axis, bq.Axis(scale=self.loss_scale, side="left", label="loss"),
                  bq.Axis(scale=self.acc_scale, side="right", label="test accuracy")],
            title="Loss",
            layout=W.Layout(width="520px", height="320px"), fig_margin=dict(top=40, bottom=40, left=55, right=55),
        )
        self.loss_fig.add_class("wb-loss")
        self.x_choice = W.ToggleButtons(options=["step", "wall time (s)"], value="step",
                                        style={"button_width": "110px"})
        self.x_choice.observe(lambda _: self._redraw(), "value")
        self.smooth = W.FloatSlider(value=smoothing, min=0.0, max=0.99, step=0.01, description="smoothing")
        self.smooth.observe(lambda _: self._redraw(), "value")

        # -- throughput ----------------------------------------------------------------
        self.tx, self.ty = bq.LinearScale(), bq.LinearScale(min=0.0)
        self.thr_lines = {} if self.aggregate else {
            w: bq.Lines(x=[], y=[], scales={"x": self.tx, "y": self.ty}, colors=[colors[i % len(colors)]],
                        labels=[w], display_legend=True)
            for i, w in enumerate(self.workers)
        }
        self.thr_band = bq.Lines(x=[], y=[[], []], scales={"x": self.tx, "y": self.ty}, colors=["#2ca02c"] * 2,
                                 fill="between", fill_colors=["#2ca02c"], fill_opacities=[0.2], opacities=[0.3, 0.3],
                                 stroke_width=0.5, labels=[spread, ""], display_legend=True)
        self.thr_median = bq.Lines(x=[], y=[], scales={"x": self.tx, "y": self.ty}, colors=["#2ca02c"],
                                   labels=["median of workers"], display_legend=True)
        self.thr_fig = bq.Figure(
            marks=list(self.thr_lines.values()) + ([self.thr_band, self.thr_median] if self.aggregate else []),
            axes=[bq.Axis(scale=self.tx, label="step"),
                  bq.Axis(scale=self.ty, side="left", label="examples/s", tick_format=render.THROUGHPUT_FORMAT)],
            title="Throughput per worker", layout=W.Layout(width="520px", height="320px"),
            fig_margin=dict(top=40, bottom=40, left=65, right=20),
        )
        self.thr_fig.add_class("wb-throughput")
        self.thr_text = W.HTML()

        # -- placement, status, controls -----------------------------------------------
        self.anatomy = W.HTML()  # inside a step: a stacked bar per worker
        self.model = W.HTML()  # the cost model's prediction beside the measurement (run.explain)
        self._anatomy_at = (0, 0.0)  # (rows, monotonic time) of its last drawing
        self.placement = W.HTML("<i>waiting for the tasks to report…</i>")
        self.placement.add_class("wb-placement")
        self.progress = W.IntProgress(value=0, min=0, max=run.job.steps, description="steps")
        self.status = W.HTML()
        self.status.add_class("wb-status")
        self.engines = W.HTML()
        self.error = W.HTML()
        self.error.add_class("wb-error")
        self.stop_button = W.Button(description="Stop", button_style="danger", icon="stop",
                                    tooltip="stop every task at the next agreed step, keeping a checkpoint")
        self.stop_button.add_class("wb-stop")
        self.stop_button.on_click(lambda _: self._stop())

        header = W.HTML(f"<b>workbench run {html.escape(run.id)}</b> · {html.escape(run.job.strategy)} · "
                        f"workers={run.job.workers} ps={run.job.ps} · global batch {run.job.global_batch_size}")
        # legends under the charts, never over the curves (render.legend_outside)
        loss_legend = W.HTML(render.legend_html(render.legend_outside(self.loss_fig.marks), "wb-loss-legend"))
        thr_legend = W.HTML(render.legend_html(render.legend_outside(self.thr_fig.marks), "wb-throughput-legend")
                            + f"<div class='wb-first-call' style='font:11px sans-serif;color:#555;max-width:440px'>"
                            f"{render.FIRST_CALL_NOTE}</div>")
        loss_box = W.VBox([W.HBox([self.x_choice, self.smooth]), self.loss_fig, loss_legend])
        thr_box = W.VBox([self.thr_text, self.thr_fig, thr_legend])
        self.faults = fault_controls.for_run(run)  # runs on a test bed: link down/up, slow, kill engines
        self.logs = logs.LogsView(run)  # every task's output, among the run's events
        self.stacks = stacks_view.StacksView(run)  # every task's stacks on demand
        self.widget = W.VBox([
            header,
            W.HBox([self.progress, self.status, self.stop_button]),
            W.HBox([loss_box, thr_box], layout=W.Layout(flex_flow="row wrap")),
            self.anatomy,
            self.model,
            W.HTML("<b>Device placement</b>"), self.placement,
            self.engines, self.error, self.stacks.widget, *([self.faults.widget] if self.faults else []), self.logs.widget,
        ])
        self.widget.add_class("wb-dashboard")
        self._redraw()
        self._thread = threading.Thread(target=self._loop, name=f"workbench-dashboard-{run.id}", daemon=True)
        self._thread.start()

    # -- display -----------------------------------------------------------------------
    @property
    def check(self) -> str:
        """What a notebook test compares of the live display: that it is this run's
        dashboard (its moment's numbers are not the saved notebook's)."""
        return f"workbench dashboard: run {self.run.id}"

    def _bundle(self, snapshot=None):
        """The live display: the widget, and ``snapshot`` (default: a rendering of the
        moment) for frontends without the widget's state."""
        return {
            MIME_WIDGET: {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id},
            "text/html": snapshot or render.snapshot_html(self.run, self._status_text(), self.check),
            "text/plain": f"<{self.check}>",
        }

    def show(self) -> "Dashboard":
        from IPython.display import display

        handle = display(self._bundle(), raw=True, display_id=True)
        self._display_id = handle.display_id if handle is not None else None
        return self

    def _ipython_display_(self):
        self.show()

    def finish(self) -> None:
        """The run has ended and a cell waited for it (``Run.wait``): that cell ends with
        the run's final static rendering as its own output, so the saved notebook, GitHub
        and nbval (which drops updates of an earlier display) all see the finished run. The
        live display keeps the widget, and for frontends without it one line saying where
        the charts are. Once per dashboard, for a dashboard that was shown."""
        if self._display_id is None or self._finished:
            return
        self._finished = True
        self._thread.join()  # its own last update first: this one follows it
        from IPython.display import display, update_display

        status = self._status_text()
        line = (f'<div class="wb-snapshot" data-wb-check="{html.escape(self.check)}" style="font:12px sans-serif">'
                f"<b>workbench run {html.escape(self.run.id)}</b> · {html.escape(status)} · its final rendering is "
                "in the output of the cell that waited for it</div>")
        update_display(self._bundle(line), raw=True, display_id=self._display_id)
        display(render.final_bundle(self.run, status), raw=True)

    # -- updating ------------------------------------------------------------------------
    def _loop(self):
        tokens = enter_cell(self._cell)
        while not self.run.done:
            time.sleep(self.interval)
            self._redraw()
        self.run.join()
        self._redraw()
        leave_cell(tokens)  # an update of a display goes with the running cell (runs/watcher.py)
        if self._display_id is not None and not self._finished:
            from IPython.display import update_display

            update_display(self._bundle(), raw=True, display_id=self._display_id)

    def _redraw(self):
        with self._redrawing:
            self._draw()

    def _draw(self):
        run = self.run
        stats = self.stats
        rows, stats.cursor = run.rows_since(stats.cursor)  # only what arrived since the last update
        stats.add(rows, run.started)
        if stats.newest > self._newest:  # metrics latency: engine step end -> widget
            self._newest = stats.newest
            self.latencies.append(time.time() - self._newest)
        x_is_time = self.x_choice.value != "step"
        self.x_axis.label = "wall time (s)" if x_is_time else "step"
        by = stats.by_step() if stats.rows else None
        with self.loss_fig.hold_sync(), self.thr_fig.hold_sync():
            eps_range = [np.inf, -np.inf]
            for w, line in self.loss_lines.items():
                step, elapsed, loss, eps = stats.worker_arrays(w)
                idx = render.thin(len(step))
                with line.hold_sync():
                    line.x, line.y = (elapsed if x_is_time else step)[idx], loss[idx]
                tl = self.thr_lines[w]
                with tl.hold_sync():
                    tl.x, tl.y = step[idx], eps[idx]
                drawn = eps[idx]
                if len(drawn) and np.isfinite(drawn).any():  # the axis spans what is drawn
                    eps_range = [min(eps_range[0], np.nanmin(drawn)), max(eps_range[1], np.nanmax(drawn))]
            if by is not None:
                idx = render.thin(len(by["step"]))
                gx = (by["elapsed"] if x_is_time else by["step"])[idx]
                if self.aggregate:
                    with self.loss_band.hold_sync():
                        self.loss_band.x, self.loss_band.y = gx, [by["loss_p10"][idx], by["loss_p90"][idx]]
                    with self.loss_median.hold_sync():
                        self.loss_median.x, self.loss_median.y = gx, by["loss_median"][idx]
                    sx = by["step"][idx]
                    with self.thr_band.hold_sync():
                        self.thr_band.x, self.thr_band.y = sx, [by["eps_p10"][idx], by["eps_p90"][idx]]
                    eps_range = [np.nanmin(by["eps_p10"][idx]), np.nanmax(by["eps_p90"][idx])]
                    with self.thr_median.hold_sync():
                        self.thr_median.x, self.thr_median.y = sx, by["eps_median"][idx]
                render.set_ticks(self.x_axis, gx.min(), gx.max())  # a few round ticks at any length
                render.set_ticks(self.thr_fig.axes[0], by["step"].min(), by["step"].max())
                smooth = livestats.smoothed(by["loss_mean"], self.smooth.value)[idx]
                with self.global_line.hold_sync():
                    self.global_line.x, self.global_line.y = gx, smooth
            if np.isfinite(eps_range).all() and eps_range[1] > eps_range[0]:
                # d3 put 16 labels on a 240 px examples/s axis (0 to 30k by 2k): a few round ones
                render.set_ticks(self.thr_fig.axes[1], eps_range[0], eps_range[1])
            ev = run.evaluations
            if len(ev):
                with self.acc_points.hold_sync():
                    if x_is_time and by is not None:
                        step_time = dict(zip(by["step"], by["elapsed"]))
                        ex = np.array([step_time.get(s, np.nan) for s in ev.step.values], float)
                    else:
                        ex = ev.step.values
                    self.acc_points.x, self.acc_points.y = ex.astype(float), ev.test_accuracy.values.astype(float)
        link_state = render.link_state(run)  # runs on a test bed: each link's rate and use, live
        self.thr_text.value = self._throughput_text(link_state=link_state)
        if stats.rows != self._anatomy_at[0] and (run.done or time.monotonic() - self._anatomy_at[1] > 1.0):
            self._anatomy_at = (stats.rows, time.monotonic())
            self.anatomy.value = render.inside_step_html(run)
            if getattr(run.job, "anatomy", True):
                self.model.value = render.model_html(run)
        self.progress.value = min(run.step, run.job.steps)
        self.status.value = f"<span class='wb-state'>{html.escape(self._status_text())}</span>"
        if self._placement_rows[0] != run.log.event_count:  # rebuilt only when a task reports
            self._placement_rows = (run.log.event_count, render.placement_tables(run.placement))
        tasks, variables = self._placement_rows[1]
        # tasks report one by one, and a replaced worker reports again from its new engine
        # (same rows, another engine and pid): redraw at once; on a test bed the links' use
        # changes all the time: redraw for that at most once a second (and when the run ends)
        key = (len(variables), tuple((t.get("role"), t.get("task"), t.get("engine"), t.get("pid")) for t in tasks))
        use = render.link_key(link_state)
        now = time.monotonic()
        changed = key != self._placement_key[0] or (
            use != self._placement_key[1] and (run.done or now - self._placement_key[2] >= 1.0))
        if tasks and changed:
            self._placement_key = (key, use, now)
            per = render.bytes_per_task(variables)
            table = run.placement.astype(object).fillna("").to_html(index=False, max_rows=60)
            self.placement.value = (render.placement_svg(tasks, variables, links=link_state) +
                                    "<div>bytes of variables per task: " +
                                    ", ".join(f"{html.escape(k)} {v:,}" for k, v in per.items()) +
                                    f"</div><details><summary>table</summary>{table}</details>")
        self.engines.value = self._engines_text()
        self.logs.update()
        if run.failure is not None and not self.error.value:
            self.error.value = (f"<b style='color:#b00'>Last error</b><pre style='white-space:pre-wrap'>"
                                f"{html.escape(str(run.failure))}</pre>")
        if run.done:
            self.stop_button.disabled = True
        self.updates += 1

    def _throughput_text(self, link_state=None):
        recent = self.stats.recent(getattr(self.run.job, "metric_names", ()))
        if recent is None:
            return "<i>no steps yet</i>"
        per_worker = recent["examples_per_s"]
        batch = self.run.job.global_batch_size
        if self.run.done:  # the run's own figures: what wb.compare, the CLI and the panel say
            fig = self._run_figures()
            where = figures.scope(self.run.job.first_step)
        else:
            fig = {"steps_per_s": recent["steps_per_s"], "step_time": recent["step_time"]}
            fig["examples_per_s"] = figures.examples_per_s(fig["steps_per_s"], batch)
            where = f"last {livestats.RECENT_S:.0f} s"
        total = fig["examples_per_s"]
        parts = render.figures_text(fig, where)
        for name, value in recent["metrics"].items():  # the user's metrics: mean over the last 5 s
            parts.append(f"{html.escape(name)} {value:.3f}")
        busiest = rates.busiest(link_state) if link_state else None
        if busiest:  # a run across test-bed hosts: the link that moves most, at the rate its samples recorded
            host, util, rate = busiest
            parts.append(f"busiest link {html.escape(host)} {rate * 8 / 1e6:,.1f} Mbit/s"
                         + (f" ({util:.0%} of {rates.format_rate(link_state[host]['rate'])})" if util is not None else
                            " (unshaped)"))
        base = self._baseline()
        if base and total == total:  # not for NaN: too short to measure
            workers = self.run.job.workers
            parts.append(f"scaling efficiency {figures.scaling_efficiency(total, workers, base):.2f} "
                         f"(vs {workers} × {base:,.0f} examples/s of one worker)")
        if self.aggregate:  # the band hides who is slow: name them
            slow = ", ".join(f"{html.escape(w)} {per_worker[w]:,.0f}" for w in recent["slowest"][:3])
            parts.append(f"<span class='wb-slowest'>slowest: {slow} examples/s</span>")
        return "<span class='wb-throughput-text'>" + " · ".join(parts) + "</span>"

    def _run_figures(self):
        return figures.history_figures(self.run.history, self.run.job.global_batch_size, self.run.job.first_step)

    def _baseline(self):
        b = self.baseline
        if b is None:
            return None
        if hasattr(b, "history"):  # a run of one worker alone: its examples/s, as compare has it
            if self._base is None or not b.done:  # a finished run's figures do not change
                h = b.history
                self._base = (figures.history_figures(h, b.job.global_batch_size, b.job.first_step)["examples_per_s"]
                              if len(h) else None)
            return self._base
        return float(b)

    def _status_text(self):
        run = self.run
        if run.failure is not None:
            state = f"failed: {type(run.failure).__name__}"
        elif run.done:
            state = "stopped" if run.stopped else "finished"
        elif self._stopping:
            state = "stopping"
        else:
            state = "running"
        text = f"{state} · step {run.step}/{run.job.steps}"
        stats = self.stats
        if not run.done and stats.rows > 1:
            rate = (stats.max_step - run.job.first_step + 1) / max(stats.max_elapsed, 1e-9)  # this attempt's
            if rate > 0:
                text += f" · ETA {max(run.job.steps - run.step, 0) / rate:,.0f} s"
        for name, value in (run.evaluation or {}).items():
            if name.startswith("test_") and name != "test_loss":
                text += f" · {name.replace('_', ' ')} {value:.3f}"
        return text

    def _engines_text(self):
        run = self.run
        cells = []
        # from what the run's watcher collected: no client call from this thread
        states = run.task_states()
        if len(run.tasks) > 2 * livestats.PER_WORKER_LINES:  # hundreds of tasks: counts, and who is not well
            counts = {}
            for state in states.values():
                counts[state] = counts.get(state, 0) + 1
            cells = [f"<span style='color:{STATE_COLORS.get(s, '#555')}'>● {n} {s}</span>"
                     for s, n in sorted(counts.items(), key=lambda kv: -kv[1])]
            bad = [n for n, s in states.items() if s in ("failed", "lost", "replaced")][:10]
            if bad:
                cells.append("<span style='color:#b00'>" + html.escape(", ".join(bad)) + "</span>")
            return "<div class='wb-engines'>" + " &nbsp; ".join(cells) + "</div>"
        for t in run.tasks:
            state = states.get(t.name, "starting")
            color = STATE_COLORS.get(state, "#555")
            cells.append(f"<span style='color:{color}'>● {html.escape(t.name)} (engine {t.engine_id}: {state})</span>")
        return "<div class='wb-engines'>" + " &nbsp; ".join(cells) + "</div>"

    def _stop(self):
        if self.run.done:
            return
        self._stopping = True
        self.stop_button.disabled = True
        self.status.value = "<span class='wb-state'>stopping…</span>"
        RunDir(self.run.run_dir).request_stop()


def _row_writers(run: Any) -> list[str]:
    """The tasks whose rows the per-worker charts draw: the workers (or the local task);
    the chief where the workers hold a split model's stages and it runs the steps."""
    from workbench.common import strategies

    if strategies.spec(run.job.strategy).splits_model:
        return [t.name for t in run.tasks if t.role == "chief"]
    return [t.name for t in run.tasks if t.role in ("worker", "local")]
