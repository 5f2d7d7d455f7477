"""The dashboard's Logs view: every task's output as it comes, among the run's events, on
the run's one time axis.

A dropdown picks all tasks or one; the view shows the newest ``LAST`` lines, newest last,
each with its elapsed seconds (the x of the loss chart against wall time, and of
``run.history``) and the step the run had reached then, and the run's events (faults
injected on a test bed, workers lost and replaced, checkpoints, evaluations) where they
happened among them: cut a link, and the event, the step it came at and the lines it caused
read one after the other. ``html`` draws it, for the widget and for the static snapshot a
saved notebook keeps (``render.snapshot_html``).
"""

from __future__ import annotations

import html as escape
import math
import threading
import time
from typing import Any

LAST = 200  # lines (and events) the view shows
SNAPSHOT = 50  # and the static snapshot a saved notebook keeps
EVERY = 1.0  # seconds between redraws while lines keep coming
ALL = "all tasks"
SKIPPED = {"kind", "time", "step"}  # an event's fields its line does not repeat


def html(run: Any, task: str | None = None, last: int = LAST) -> str:
    """The newest ``last`` lines of ``run``'s tasks (``task``: of that one only) and its
    events among them, oldest first, in a box that shows its newest end."""
    lines = run.logs(task=task, last=last)
    events = run.events
    rows = [(t, e, s, "line", f"{name} {stream}", text)
            for t, e, s, name, stream, text in zip(lines.time, lines.elapsed, lines.step, lines.task, lines.stream,
                                                    lines.line)]
    if len(events):
        since = lines.time.iloc[0] if len(lines) >= last else float("-inf")  # events among the lines shown
        for _, ev in events[events.time >= since].iterrows():
            rows.append((ev.time, ev.time - run.started, ev.step, "event", ev.kind, _event_text(ev)))
    if not rows:
        return ""
    rows = sorted(rows, key=lambda r: r[0])[-last:]
    body = "".join(_row(*r[1:]) for r in rows)
    # column-reverse: the box opens scrolled to its end, the newest lines
    return ("<div class='wb-logs' style='max-height:260px;overflow:auto;display:flex;flex-direction:column-reverse;"
            "border:1px solid #ddd;font:11px/1.35 monospace'><div>" + body + "</div></div>")


def _row(elapsed: float, step: Any, kind: str, who: str, text: str) -> str:
    step = "" if _missing(step) else f"step {int(step)}"
    style = "background:#fff3cd;font-weight:bold" if kind == "event" else ""
    return (f"<div class='wb-log-{kind}' style='white-space:pre-wrap;{style}'>"
            f"<span style='color:#888'>{elapsed:8.2f} s {step:<10}</span> "
            f"<span style='color:#27c'>{escape.escape(who)}</span>  {escape.escape(text)}</div>")


def _event_text(ev: Any) -> str:
    """An event's fields but its kind, time and step: ``fault=link_down host=h2``."""
    return " ".join(f"{k}={v}" for k, v in ev.items() if k not in SKIPPED and not _missing(v))


def _missing(value: Any) -> bool:
    """None, or NaN (a field an event lacks, in ``run.events``' table)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


class LogsView:
    """The widget (``widget``): a dropdown of all tasks or one, above ``html``'s box, redrawn by
    ``update`` when lines or events came (at most every ``EVERY`` seconds while the run trains)."""

    def __init__(self, run: Any, last: int = LAST) -> None:
        import ipywidgets as W

        self.run = run
        self.last = last
        self.task = W.Dropdown(options=[ALL, *[t.name for t in run.tasks]], value=ALL, description="Logs",
                               layout=W.Layout(width="220px"), style={"description_width": "40px"})
        self.task.observe(lambda _: self.update(force=True), "value")
        self.box = W.HTML("<i>no output yet</i>")
        self.widget = W.VBox([self.task, self.box])
        self.widget.add_class("wb-logs-view")
        self._lock = threading.Lock()  # the dashboard's thread and the dropdown's callback both draw
        self._key: tuple | None = None
        self._at = 0.0

    def update(self, force: bool = False) -> None:
        run = self.run
        with self._lock:
            key = (run.log.lines.count, run.log.event_count, self.task.value)
            if key == self._key or (not force and not run.done and time.monotonic() - self._at < EVERY):
                return
            self._key, self._at = key, time.monotonic()
            drawn = html(run, None if self.task.value == ALL else self.task.value, self.last)
            self.box.value = drawn or "<i>no output yet</i>"
