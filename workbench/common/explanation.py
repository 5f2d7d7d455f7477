"""``Explanation``: how ``run.explain()`` and ``wb.predict(...)`` show the cost model's
figures beside a run's measurements, as text and as a notebook's HTML table."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


class Explanation:
    """Figures predicted and measured side by side (``table``, a DataFrame: figure,
    predicted, measured, ratio = measured / predicted, source) and one ``sentence`` naming
    the bottleneck; ``prediction``: the model's own figures (``costmodel.predict``)."""

    def __init__(self, table: pd.DataFrame, sentence: str, prediction: dict[str, Any], title: str) -> None:
        self.table = table
        self.sentence = sentence
        self.prediction = prediction
        self.title = title

    def __repr__(self) -> str:
        shown = self.table.copy()
        for col in ("predicted", "measured", "ratio"):
            shown[col] = [_fmt(v, col == "ratio") for v in shown[col]]
        return f"{self.title}\n{self.sentence}\n\n{shown.to_string(index=False)}"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td style='text-align:left'>{html.escape(r.figure)}</td><td>{_fmt(r.predicted)}</td>"
            f"<td>{_fmt(r.measured)}</td><td>{_ratio_html(r.ratio)}</td>"
            f"<td style='text-align:left;color:#555'>{html.escape(r.source)}</td></tr>"
            for r in self.table.itertuples())
        return (f"<div class='wb-explain'><b>{html.escape(self.title)}</b><div>{html.escape(self.sentence)}</div>"
                "<table><thead><tr><th style='text-align:left'>figure</th><th>predicted</th><th>measured</th>"
                f"<th>measured / predicted</th><th style='text-align:left'>source</th></tr></thead><tbody>{rows}"
                "</tbody></table></div>")


def _fmt(value: Any, ratio: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if ratio:
        return f"{value:.2f}"
    a = abs(value)
    return f"{value:,.0f}" if a >= 100 else f"{value:.3g}"


def _ratio_html(ratio: float | None) -> str:
    if ratio is None or not math.isfinite(ratio):
        return ""
    color = "#2a2" if 0.8 <= ratio <= 1.25 else "#c80" if 0.5 <= ratio <= 2 else "#b00"
    return f"<span style='color:{color}'>{ratio:.2f}</span>"
