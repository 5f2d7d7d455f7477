"""Static renderings of a run (SVG and HTML), for saved notebooks and the placement picture.

Pure functions of a run's metrics stream (history, evaluations, placement, status): the
same code draws the live dashboard's placement view and the snapshot left in a cell's
output when the run ends, which GitHub and nbviewer show without a kernel.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from workbench.common import figures
from workbench.common.rates import format_rate
from workbench.kernel.views import logs
from workbench.kernel.views.checks import check_line
from workbench.kernel.views.livestats import per_worker, smoothed

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
ROLE_COLORS = {"chief": "#fde0c5", "ps": "#d4e6f9", "worker": "#d9f2d0", "local": "#eeeeee"}


def thin(n: int, most: int = 1000) -> np.ndarray:
    """Indices that keep at most ``most`` of ``n`` points, always keeping the last."""
    if n <= most:
        return np.arange(n)
    idx = np.linspace(0, n - 1, most).astype(int)
    return np.unique(idx)


X_TICKS = 6  # tick labels on an x axis: "3,000"-wide labels stay apart on a 450 px axis
Y_TICKS = 5
THROUGHPUT_FORMAT = "~s"  # d3 format of d3's own round ticks: 24k, 1.2M; compact() in the static charts


def set_ticks(axis: Any, lo: float, hi: float, most: int = X_TICKS) -> None:
    """Give a bqplot ``axis`` at most ``most`` round ticks over [lo, hi] (its scale's data
    range): d3's own choice crowds a 3,000-step axis with 16 labels, and bqplot's
    ``num_ticks`` spaces them evenly at unround values (74, 151, 227). Labelled with the
    decimals they need (``tick_format``), unless the axis has a format of its own."""
    ticks = nice_ticks(float(lo), float(hi), most)
    if len(ticks) >= 2 and list(axis.tick_values if axis.tick_values is not None else []) != ticks:
        axis.tick_values = np.asarray(ticks)
        if axis.tick_format is None or axis.tick_format.startswith(",."):  # none, or one this chose
            axis.tick_format = tick_format(ticks)


def tick_format(ticks: Sequence[float]) -> str:
    """The d3 format that shows each of ``ticks`` as it is, with as few decimals as that
    takes: bqplot's own rounds ticks 2.5 apart to whole numbers (2.5, 7.5 and 12.5 read
    3, 8 and 13)."""
    decimals = next((k for k in range(7) if np.allclose(np.round(ticks, k), ticks, rtol=0, atol=1e-9)), 6)
    return f",.{decimals}f"


def compact(value: float) -> str:
    """A tick label short enough to stay clear of its axis label: 24k, 1.2M, 0.35, 3,000."""
    v = float(value)
    if not np.isfinite(v):
        return ""
    a = abs(v)
    if a >= 1e4:
        for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if a >= div:
                return f"{v / div:.3g}{unit}"
    if a >= 100 or v == int(v):
        return f"{v:,.0f}"
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, most: int = X_TICKS) -> list[float]:
    """As many round tick values (1, 2, 2.5 or 5 x 10^k apart) inside [lo, hi] as fit in ``most``."""
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        return [lo] if np.isfinite(lo) else []
    base = 10 ** np.floor(np.log10((hi - lo) / max(most, 1)))
    for step in (m * base * k for k in (1, 10, 100) for m in (1, 2, 2.5, 5)):
        ticks = np.arange(np.ceil(lo / step) * step, hi + step * 1e-9, step)
        if len(ticks) <= most:
            return [float(t) + 0.0 for t in np.round(ticks, 12)]  # no 0.6000000000000001, no -0.0
    return [float(lo), float(hi)]


FIRST_CALL_NOTE = ("The first call's steps sit near 0 examples/s: their time includes tracing the training "
                   "function (once per run).")


def legend_html(entries: list[tuple[str, str]], kind: str = "") -> str:
    """A legend beside a chart, never over it: ``entries`` are (label, colour)."""
    items = "".join(f'<span class="wb-legend-item" style="white-space:nowrap;margin-right:10px">'
                    f'<span style="color:{c}">&#9644;</span> {html.escape(str(label))}</span>'
                    for label, c in entries if label)
    return f'<div class="wb-legend {kind}" style="font:11px sans-serif;line-height:16px">{items}</div>'


def legend_outside(marks: list[Any]) -> list[tuple[str, str]]:
    """The legend entries of bqplot ``marks`` (label, colour), their own legend turned off:
    bqplot draws a legend inside the plot area, over the curves, so charts show these in
    ``legend_html`` beside the figure instead."""
    entries = []
    for mark in marks:
        if getattr(mark, "display_legend", False):
            colors = list(getattr(mark, "colors", []) or ["#000"])
            for i, label in enumerate(getattr(mark, "labels", []) or []):
                entries.append((label, colors[i % len(colors)]))
            mark.display_legend = False
    return entries


def line_chart(series: Sequence[tuple[str, Any, Any]], title: str, xlabel: str, ylabel: str, width: int = 440,
               height: int = 220, points: Sequence[tuple[str, Any, Any]] = ()) -> str:
    """An SVG line chart. ``series``: [(label, xs, ys)]; ``points``: [(label, xs, ys)] drawn as dots
    on a 0-1 right-hand axis (accuracy). A few round ticks a side, compact tick labels clear
    of the axis labels, and the legend under the plot, where it covers no curve."""
    labels = [s[0] for s in series] + [f"● {p[0]}" for p in points if len(p[1])]
    pad_l, pad_r, pad_t, pad_b = 58, 40 if points else 20, 24, 34  # right: half of a "3,000" tick label
    col_w = max(60, 6.5 * max((len(label) for label in labels), default=0) + 16)  # px of the longest label
    per_row = max(1, int((width - pad_l) // col_w))
    legend_h = 14 * ((len(labels) + per_row - 1) // per_row)
    plot_h = height - pad_t - pad_b
    height = height + legend_h
    xs_all = np.concatenate([np.asarray(s[1], float) for s in series if len(s[1])] or [np.zeros(1)])
    ys_all = np.concatenate([np.asarray(s[2], float) for s in series if len(s[2])] or [np.zeros(1)])
    ys_all = ys_all[np.isfinite(ys_all)] if np.isfinite(ys_all).any() else np.zeros(1)
    x0, x1 = float(xs_all.min()), float(xs_all.max()) or 1.0
    y0, y1 = float(min(ys_all.min(), 0)), float(ys_all.max()) or 1.0
    if x1 == x0:
        x1 = x0 + 1
    w, h = width - pad_l - pad_r, plot_h

    def px(x):
        return pad_l + (x - x0) / (x1 - x0) * w

    def py(y, lo=y0, hi=y1):
        return pad_t + h - (y - lo) / ((hi - lo) or 1) * h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'style="font:11px sans-serif;background:#fff">',
           f'<text x="{pad_l}" y="14" font-weight="bold">{html.escape(title)}</text>',
           f'<rect class="wb-plot" x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" fill="none" stroke="#ccc"/>',
           f'<text x="{pad_l + w / 2}" y="{pad_t + h + 28}" text-anchor="middle">{html.escape(xlabel)}</text>',
           f'<text x="12" y="{pad_t + h / 2}" transform="rotate(-90 12 {pad_t + h / 2})" text-anchor="middle">'
           f'{html.escape(ylabel)}</text>']
    for t in nice_ticks(y0, y1, Y_TICKS):
        out.append(f'<text x="{pad_l - 4}" y="{py(t) + 4:.1f}" text-anchor="end">{compact(t)}</text>'
                   f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#eee"/>')
    for t in nice_ticks(x0, x1, X_TICKS):
        out.append(f'<text x="{px(t):.1f}" y="{pad_t + h + 13}" text-anchor="middle">{compact(t)}</text>')
    for i, (label, xs, ys) in enumerate(series):
        idx = thin(len(xs), 400)
        pts = " ".join(f"{px(float(xs[j])):.1f},{py(float(ys[j])):.1f}" for j in idx if np.isfinite(ys[j]))
        color = COLORS[i % len(COLORS)]
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>')
    for label, xs, ys in points:
        for x, y in zip(xs, ys):
            out.append(f'<circle cx="{px(float(x)):.1f}" cy="{py(float(y), 0, 1):.1f}" r="3.5" fill="#000"/>')
        if len(xs):
            out.append(f'<text x="{width - 4}" y="{pad_t + 8}" text-anchor="end">1.0</text>'
                       f'<text x="{width - 4}" y="{pad_t + h}" text-anchor="end">0</text>')
    colors = [COLORS[i % len(COLORS)] for i in range(len(series))] + ["#000"] * (len(labels) - len(series))
    top = pad_t + h + 34
    for i, (label, color) in enumerate(zip(labels, colors)):  # the legend, under the plot
        lx, ly = pad_l + (i % per_row) * col_w, top + 14 * (i // per_row) + 10
        out.append(f'<text class="wb-legend" x="{lx}" y="{ly}" fill="{color}">{html.escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def svg_img(svg: str, alt: str = "") -> str:
    """An SVG drawing as an ``<img>`` with a ``data:`` URI, for the static HTML a notebook
    saves: JupyterLab's sanitizer drops inline ``<svg>`` from the outputs of a notebook not
    (yet) trusted, leaving its text run together, and keeps images. Only ``%`` and ``#``
    need encoding in the URI; the rest is HTML-escaped, so the drawing's text stays readable
    in the saved file."""
    uri = "data:image/svg+xml;charset=utf-8," + svg.replace("%", "%25").replace("#", "%23")
    return f'<img src="{html.escape(uri, quote=True)}" alt="{html.escape(alt, quote=True)}">'


def svgs_in(text: str) -> list[str]:
    """The SVG drawings ``svg_img`` put in ``text``, decoded."""
    import re

    return [html.unescape(m).split(",", 1)[1].replace("%23", "#").replace("%25", "%")
            for m in re.findall(r'<img src="(data:image/svg\+xml;[^"]*)"', text)]


def placement_svg(tasks: list[dict[str, Any]], variables: list[dict[str, Any]], width: int = 640,
                  links: dict[str, dict[str, Any]] | None = None) -> str:
    """Hosts as boxes holding their engines; each engine shows its role, devices, and for PS
    tasks the bytes of the variables they hold. ``links`` (a run on a test bed's hosts:
    ``LinkWatch.state()``, {host: {"rate", "bytes_per_s", "util"}}) draws each host's link
    to the network with its set rate and measured use, the busiest one in red."""
    by_host = {}
    for t in tasks:
        by_host.setdefault(t.get("host") or "?", []).append(t)
    held = {}
    for v in variables:
        held.setdefault((v["role"], v["task"]), []).append(v)
    links = {h: s for h, s in (links or {}).items() if h in by_host}
    busiest = max(links, key=lambda h: links[h]["bytes_per_s"]) if links else None
    if busiest is not None and links[busiest]["bytes_per_s"] <= 0:
        busiest = None  # nothing moved: no link is the busiest
    left = 170 if links else 4  # the network and the links, left of the hosts
    box_w, box_h, gap = 190, 88, 10  # five lines of text at most, each inside its box
    rows = []
    y = 8
    for host, ts in by_host.items():
        per_row = max(1, (width - left - 20) // (box_w + gap))
        lines = (len(ts) + per_row - 1) // per_row
        host_h = 26 + lines * (box_h + gap)
        stroke = ' stroke="#d62728" stroke-width="2"' if host == busiest else ' stroke="#999"'
        rows.append(f'<rect x="{left}" y="{y}" width="{width - left - 4}" height="{host_h}" rx="6" fill="#fafafa"{stroke}/>'
                    f'<text x="{left + 8}" y="{y + 16}" font-weight="bold">host {html.escape(str(host))}</text>')
        if host in links:
            rows.append(_link_svg(links[host], y + 20, left, busy=host == busiest))
        for i, t in enumerate(sorted(ts, key=lambda t: (t.get("role") != "chief", t.get("role"), t.get("task")))):
            bx = left + 8 + (i % per_row) * (box_w + gap)
            by = y + 24 + (i // per_row) * (box_h + gap)
            role, task = t.get("role"), t.get("task")
            mine = held.get((role, task), [])
            devices = t.get("device") or ""
            short = ", ".join(d.split("device:")[-1] for d in devices.split(", ") if d) or "-"
            rows.append(f'<rect x="{bx}" y="{by}" width="{box_w}" height="{box_h}" rx="4" '
                        f'fill="{ROLE_COLORS.get(role, "#eee")}" stroke="#666"/>'
                        f'<text x="{bx + 6}" y="{by + 15}" font-weight="bold">{html.escape(f"{role}:{task}")}</text>'
                        f'<text x="{bx + 6}" y="{by + 30}">engine {t.get("engine")} · pid {t.get("pid")}</text>'
                        f'<text x="{bx + 6}" y="{by + 45}">devices: {html.escape(short)}</text>')
            if mine:
                total = sum(int(v["bytes"]) for v in mine)
                state = sum(int(v["bytes"]) for v in mine if v.get("kind") == "optimizer")
                rows.append(f'<text x="{bx + 6}" y="{by + 60}">{len(mine)} variables, {total:,} bytes</text>')
                if state:
                    rows.append(f'<text x="{bx + 6}" y="{by + 75}">optimizer state: {state:,} bytes</text>')
        y += host_h + 8
    if links:  # the network (the test bed's bridge) every link joins
        rows.insert(0, f'<rect x="4" y="8" width="14" height="{y - 16}" rx="3" fill="#555"/>'
                       f'<text x="11" y="{y / 2}" transform="rotate(-90 11 {y / 2})" text-anchor="middle" '
                       f'fill="#fff" font-size="10">network</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" '
            f'style="font:11px sans-serif">{"".join(rows)}</svg>')


def _link_svg(state, y, left, busy):
    """One host's link: a line from the network to the host, as thick as it is full, its
    rate above, its measured use below, a short line each: they fit in the ``left`` px
    between the network and the hosts (one line of use, rate and "busiest" ran under the
    host's first engine, cut at "busi")."""
    util = state["util"]
    color = "#d62728" if busy else "#1f77b4"
    thickness = 1.5 + 5 * min(util, 1.0) if util is not None else 1.5
    used = [f"{util:.0%} used"] if util is not None else []
    used += [f"{state['bytes_per_s'] * 8 / 1e6:,.1f} Mbit/s"] + (["busiest"] if busy else [])
    weight = ' font-weight="bold"' if busy else ""
    return (f'<g class="wb-link{" wb-busiest" if busy else ""}">'
            f'<line x1="18" y1="{y}" x2="{left}" y2="{y}" stroke="{color}" stroke-width="{thickness:.1f}"/>'
            f'<text x="24" y="{y - 5}" fill="{color}">link {html.escape(format_rate(state["rate"]))}</text>'
            + "".join(f'<text x="24" y="{y + 14 * (i + 1)}" fill="{color}"{weight}>{html.escape(line)}</text>'
                      for i, line in enumerate(used))
            + "</g>")


def link_state(run: Any) -> dict[str, dict[str, Any]] | None:
    """Each link's rate and use for a run on a test bed's hosts (``LinkWatch.state``): the
    last 2 s while it trains, from its first step on once it is done; None for other runs."""
    watch = getattr(run, "links", None)  # a live run's LinkWatch, a recorded run's samples, or None
    if watch is None:
        return None
    h = run.history if run.done else None
    since = float((h.time - h.step_time.fillna(0)).min()) if h is not None and len(h) else None
    return watch.state(since=since) or None


def link_key(state: dict[str, dict[str, Any]] | None) -> tuple[Any, ...] | None:
    """What the placement picture shows of ``link_state``: each link's rate and its use
    in Mbit/s as drawn (one decimal); a new key means the picture reads differently."""
    if not state:
        return None
    return tuple((h, s["rate"], round(s["bytes_per_s"] * 8 / 1e6, 1)) for h, s in sorted(state.items()))


def placement_tables(placement: pd.DataFrame | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(tasks rows, variables rows) as lists of dicts from ``Run.placement``."""
    if placement is None or not len(placement):
        return [], []
    p = placement.astype(object).where(placement.notna(), None)
    tasks = p[p.variable.isna()].to_dict("records")
    variables = p[p.variable.notna()].to_dict("records")
    return tasks, variables


def bytes_per_task(variables: list[dict[str, Any]]) -> dict[str, int]:
    out = {}
    for v in variables:
        key = f"{v['role']}:{v['task']}"
        out[key] = out.get(key, 0) + int(v["bytes"])
    return out


PART_COLORS = {"input": "#9467bd", "compute": "#2ca02c", "communication": "#1f77b4", "waiting": "#d62728",
               "other": "#c7c7c7"}


def bytes_sent_text(table: pd.DataFrame | None, compression: str | None = None, cuts: bool = False) -> str:
    """One line on what the all-reduce moves (``cuts``: a split model's cuts): bytes per step
    (``run.history``'s ``comm_bytes``), in which precision, and the rate at the workers' mean
    step time; "" when the run sends nothing (single, parameter server)."""
    if table is None or not len(table) or not table.bytes_per_step.fillna(0).any():
        return ""
    sent = float(table.bytes_per_step.mean())
    rate = float((table.bytes_per_step / table.step_time).mean())
    if cuts:
        return (f"<div class='wb-bytes'>Across the cuts: <b>{sent:,.0f} B/step</b> (activations forward, "
                f"their gradients back), {rate / 1e6:,.2f} MB/s</div>")
    return (f"<div class='wb-bytes'>All-reduce: <b>{sent:,.0f} B/step</b> per worker "
            f"({html.escape(compression or 'float32')}), {rate / 1e6:,.2f} MB/s per worker</div>")


def anatomy_html(table: pd.DataFrame | None, width: int = 420, compression: str | None = None,
                 cuts: bool = False) -> str:
    """One stacked bar per worker (``Run.anatomy()``'s shares), its step time and bytes sent
    per step, the straggler named when there is one, and the all-reduce's bytes per step
    (``compression``: the run's, named beside them)."""
    if table is None or not len(table):
        return ""
    legend = " ".join(f'<span style="color:{c}">&#9632;</span> {p}' for p, c in PART_COLORS.items())
    rows = []
    for _, r in table.iterrows():
        bar = "".join(f'<div title="{p} {r[p]:.0%}" style="width:{max(float(r[p]), 0) * width:.1f}px;'
                      f'background:{c};height:14px"></div>' for p, c in PART_COLORS.items())
        sent = f" · {int(r.bytes_per_step):,} B/step sent" if r.bytes_per_step else ""
        flag = " <b style='color:#b00'>straggler</b>" if r.straggler else ""
        rows.append(f'<div class="wb-anatomy-row" style="display:flex;align-items:center;gap:6px">'
                    f'<span style="width:70px">{html.escape(str(r.worker))}</span>'
                    f'<div style="display:flex;width:{width}px;background:#f4f4f4">{bar}</div>'
                    f'<span>{r.step_time * 1e3:.2f} ms/step{sent}{flag}</span></div>')
    slow = table[table.straggler]
    note = ""
    if len(slow):
        w = slow.iloc[0]
        others = table[~table.straggler].busy.mean()
        note = (f"<div class='wb-straggler'>Straggler: <b>{html.escape(str(w.worker))}</b> is busy "
                f"{w.busy / others - 1:.0%} longer per step than the others</div>")
    return (f'<div class="wb-anatomy" style="font:12px sans-serif"><b>Inside a step</b> '
            f'(share of wall time) {legend}{"".join(rows)}{note}{bytes_sent_text(table, compression, cuts)}</div>')


def inside_step_html(run: Any) -> str:
    """What the dashboard and its snapshot show of a run's steps: the anatomy's bars
    (``anatomy_html``) or, for a run with ``anatomy=False`` that all-reduces, the bytes
    line alone."""
    from workbench.common import anatomy

    from workbench.common import strategies

    compression, cuts = getattr(run.job, "compression", None), strategies.spec(run.job.strategy).splits_model
    history = run.history
    if anatomy.has_anatomy(history):  # nothing until steps past the skipped first calls (tracing)
        return anatomy_html(run.anatomy(), compression=compression, cuts=cuts)
    line = bytes_sent_text(anatomy.sent(history), compression, cuts)
    return f'<div class="wb-anatomy" style="font:12px sans-serif">{line}</div>' if line else ""


STEPS_PER_S_TIP = "global steps per second of wall time, time between steps included (common/figures.py)"
STEP_TIME_TIP = ("the median of one worker's seconds per step as it timed them: around its training call, "
                 "without the time between calls, so 1 / step time is not steps/s (under a parameter server: "
                 "from the end of its previous call, its waits for the chief included)")


def figures_text(fig: dict, where: str) -> list[str]:
    """The speed figures (``common/figures.py``) as the dashboard and its snapshot print
    them, after what they cover (``where``), each saying what it is: steps/s counts wall
    time, a worker's step time does not."""
    if fig["steps_per_s"] == fig["steps_per_s"]:
        parts = [f"<b>{fig['examples_per_s']:,.0f}</b> examples/s",
                 f"<span title='{html.escape(STEPS_PER_S_TIP)}'>{fig['steps_per_s']:,.1f} steps/s (wall clock)</span>"]
    else:  # NaN: too few distinct step ends
        parts = [f"steps/s {figures.TOO_SHORT}"]
    if fig["step_time"] == fig["step_time"]:
        parts.append(f"<span title='{html.escape(STEP_TIME_TIP)}'>step time {fig['step_time'] * 1000:.2f} ms "
                     "(median, as a worker timed it)</span>")
    parts[0] = f"{html.escape(where)}: {parts[0]}"
    return parts


def model_html(run: Any) -> str:
    """The cost model's line (``run.explain()``): the sentence naming the bottleneck, with predicted
    against measured, the table folded under it; a note while no step is past the two tracing calls."""
    from workbench.errors import ConfigError

    try:
        e = run.explain()
    except ConfigError:
        return ("<div class='wb-model' style='font:12px sans-serif;color:#555'><b>Predicted, then measured</b> · "
                + ("no step past the first two calls (they trace): train more steps" if run.done else
                   "waiting for steps past the first two calls") + "</div>")
    return (f"<div class='wb-model' style='font:12px sans-serif'><b>Predicted, then measured</b> · "
            f"{html.escape(e.sentence)}<details><summary>the model's figures</summary>{e._repr_html_()}"
            "</details></div>")


def final_bundle(run: Any, status: str) -> dict[str, str]:
    """A run's static rendering as a mime bundle (``Run.wait``'s cell, ``wb.load(id).dashboard()``): text = check line."""
    check = check_line(run)
    return {"text/html": snapshot_html(run, status, check), "text/plain": f"<{check}>"}


def snapshot_html(run: Any, status: str, check: str | None = None) -> str:
    """The whole dashboard as static HTML: status, speed figures, loss, throughput, placement,
    the tasks' last log lines. ``check``: what a notebook test compares of it
    (``views/checks.py``), on its root element."""
    h = run.history
    speed = ""
    if len(h) and run.job.global_batch_size:
        first = run.job.first_step
        shown = figures_text(figures.history_figures(h, run.job.global_batch_size, first), figures.scope(first))
        speed = f"<div class='wb-throughput-text'>{' · '.join(shown)}</div>"
    checked = "" if check is None else f' data-wb-check="{html.escape(check)}"'
    parts = [f'<div class="wb-snapshot"{checked} style="font:12px sans-serif">'
             f'<b>workbench run {html.escape(run.id)}</b> · '
             f'{html.escape(status)}{speed}<div style="display:flex;flex-wrap:wrap;gap:8px">']
    if len(h):
        series = per_worker(h, "loss")
        glob = h.groupby("step").loss.mean()
        series.append(("global (smoothed)", glob.index.values, smoothed(glob.values)))
        ev = run.evaluations
        parts.append(svg_img(line_chart(series, "Loss", "step", "loss", points=[
            ("test accuracy", ev.step.values, ev.test_accuracy.values)] if len(ev) else ()), "loss chart"))
        thr = per_worker(h, "examples_per_s")
        parts.append(svg_img(line_chart(thr, "Throughput per worker", "step", "examples/s"), "throughput chart"))
    parts.append("</div>")
    if len(h):
        parts.append(f"<div class='wb-first-call' style='color:#555'>{FIRST_CALL_NOTE}</div>")
    if hasattr(run, "anatomy"):
        parts.append(inside_step_html(run))
        parts.append(model_html(run))
    tasks, variables = placement_tables(run.placement)
    if tasks:
        parts.append(svg_img(placement_svg(tasks, variables, links=link_state(run)), "device placement"))
        per = bytes_per_task(variables)
        if per:
            parts.append("<div>bytes of variables per task: " +
                         ", ".join(f"{html.escape(k)} {v:,}" for k, v in per.items()) + "</div>")
    parts.append(logs.html(run, last=logs.SNAPSHOT))  # the tasks' last lines, among the events
    parts.append("</div>")
    return "".join(parts)
