"""``wb.predicted_vs_measured(...)``: the chart the walkthroughs draw beside their checks,
a grey bar of what the cost model (or a formula) predicted beside a coloured bar of what
was measured, one pair per label, each measured bar topped by measured / predicted."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING

from workbench.errors import invalid

if TYPE_CHECKING:
    from matplotlib.axes import Axes

PREDICTED_COLOR = "#bbb"
MEASURED_COLOR = "#2471a3"


def predicted_vs_measured(labels: Sequence[str], predicted: Sequence[float], measured: Sequence[float | None], *,
                          ax: Axes | None = None, ylabel: str = "", title: str = "",
                          predicted_label: str = "predicted", measured_label: str = "measured",
                          color: str = MEASURED_COLOR, scale: float = 1.0) -> Axes:
    """Draw predicted beside measured for each of ``labels`` on ``ax`` (a new figure's, by
    default) and return it. A measured value of None or NaN (not measured here) draws no
    bar and no ratio. ``scale`` divides every value as drawn (1e3: bytes shown as KB); the
    ratios are the values' own.

    ``wb.predicted_vs_measured(["narrow cut", "wide cut"], [7.1, 2.0], [6.8, 2.1], ylabel="steps/s")``"""
    labels, predicted, measured = _checked(labels, predicted, measured)
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool) or not scale > 0:
        raise invalid("scale", scale, "a number > 0 (each value is drawn divided by it)")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(labels) + 2.5), 2.8))
    x = list(range(len(labels)))
    ax.bar([i - 0.2 for i in x], [p / scale for p in predicted], 0.4, color=PREDICTED_COLOR, label=predicted_label)
    shown = [i for i in x if measured[i] is not None]
    ax.bar([i + 0.2 for i in shown], [measured[i] / scale for i in shown], 0.4, color=color, label=measured_label)
    top = max([p / scale for p in predicted] + [measured[i] / scale for i in shown] + [0.0])
    for i in shown:
        if predicted[i] > 0:
            ax.annotate(f"{measured[i] / predicted[i]:.2f}", (i + 0.2, measured[i] / scale), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7, color="#333")
    top = max(top, ax.dataLim.y1 if ax.dataLim.height > 0 else 0.0)  # what the caller drew on ax shows too
    ax.set(xticks=x, xticklabels=labels, ylabel=ylabel, title=title, ylim=(0, 1.18 * top if top > 0 else 1))
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16 if len(labels) < 5 else -0.24),
              title="above each measured bar: measured / predicted", title_fontsize=7)  # under the chart
    ax.figure.tight_layout()
    return ax


def _checked(labels, predicted, measured) -> tuple[list[str], list[float], list[float | None]]:
    for name, values in (("labels", labels), ("predicted", predicted), ("measured", measured)):
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or not len(values):
            raise invalid(name, values, "a non-empty sequence (list, tuple, array or Series), one entry per label")
    labels = [str(label) for label in labels]
    predicted, measured = list(predicted), list(measured)
    for name, values in (("predicted", predicted), ("measured", measured)):
        if len(values) != len(labels):
            raise invalid(name, values, f"{len(labels)} values, one per label ({len(values)} given)")
    for i, p in enumerate(predicted):
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(p) or p < 0:
            raise invalid("predicted", predicted, f"finite numbers >= 0 (entry {i}, for {labels[i]!r}, is {p!r})")
    for i, m in enumerate(measured):
        if m is None or (isinstance(m, numbers.Real) and not isinstance(m, bool) and math.isnan(m)):
            measured[i] = None
        elif isinstance(m, bool) or not isinstance(m, numbers.Real) or not math.isfinite(m) or m < 0:
            raise invalid("measured", measured, f"numbers >= 0, or None where not measured (entry {i}, for "
                          f"{labels[i]!r}, is {m!r})")
    return labels, [float(p) for p in predicted], [None if m is None else float(m) for m in measured]
