"""What nbval compares of a workbench notebook's outputs: the values that vary between
executions replaced, on both sides (the saved output and the new one), before comparing.

Each entry is a regular expression and its replacement (a string, or a function of the
match), in the order nbval applies them to every text of every output (a stream, each
mime type of a display); the plugin (``plugin.py``) puts them first, before the patterns of
a user's ``--nbval-sanitize-with`` file. Pure: ``sanitize(text)`` is what nbval does with them.

- The workbench's own renderings (a run's dashboard and final rendering, ``wb.compare``,
  a cluster) are compared by the line their root element carries (``data-wb-check``,
  ``kernel/views/checks.py``): how the run ended, and its final loss and test metrics where
  a seeded run gives the same numbers every time. Charts, speeds and tables are not.
- Then, in any text: run ids, memory addresses, PIDs, addresses and ports, engine ids
  (a shared cluster numbers its engines on), throughput, timings, timestamps, run
  directories and temporary paths.
- ``(measured ...)``: a claim's measured value beside it (``wb.within`` prints one): the
  claim is compared, the number shown.

``tolerate``: the figures a seeded run reproduces, in a run's check line only (``workbench
run ...``: its final loss and test metrics), are compared within ``FIGURES``' tolerances, not
digit for digit: TensorFlow's oneDNN kernels round differently on different CPU types. The
same seeded 3,000-step parameter-server run read a final loss of 0.0815 on one machine type
and 0.0814 on another (0.12%): losses are compared to 1%. Test accuracy moves by whole
examples (1/359 of the digits' test split): to 0.006, two examples. Other printed numbers
are compared as printed. The plugin applies it to each new output against the saved output
of the same kind before nbval compares them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

Replacement = str | Callable[[re.Match], str]


def _checked(match: re.Match) -> str:
    return f"<{html.unescape(match.group(1))}>"


_NUMBER = r"\d[\d,]*(?:\.\d+)?"

PATTERNS: list[tuple[re.Pattern, Replacement]] = [
    # a workbench rendering: its check line instead of its charts and tables
    (re.compile(r'\A\s*<div\b[^>]*?\sdata-wb-check="([^"]*)".*\Z', re.S), _checked),
    # a cluster's or a comparison's text: its first line (its table has PIDs, ports, speeds)
    (re.compile(r"\A(<workbench\.Cluster [^\n]*>|<workbench comparison: [^\n]*>)\n.*\Z", re.S), r"\1"),
    (re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b"), "RUN-ID"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0xADDRESS"),
    (re.compile(r"\(measured [^)]*\)"), "(measured ...)"),
    (re.compile(r"(?:/[^\s/'\"<>]+)+/runs/RUN-ID"), "WORKBENCH_HOME/runs/RUN-ID"),
    (re.compile(r"(?<![\w/])/tmp/[^\s'\"<>),]*"), "/tmp/..."),
    (re.compile(r"\b(pids?)([ =:]+)\d+"), r"\1\2PID"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b"), "ADDRESS"),
    (re.compile(r"\b(localhost|port)([ :=])\d{2,5}\b"), r"\1\2PORT"),
    (re.compile(r"\b(engines?)( ids?)? (\d+)\b"), r"\1\2 N"),
    (re.compile(rf"\b{_NUMBER}(\s?)([kMG]?(?:examples|steps|B|bit|byte)s?/s)"), r"N\1\2"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"), "TIMESTAMP"),
    (re.compile(rf"\b{_NUMBER}(\s?)(ms|µs|s|sec|seconds|min)\b(?!/)"), r"T\1\2"),
]


# a figure a seeded run reproduces, as check lines print them: (kind, tolerance)
FIGURES = {"final loss": ("relative", 0.01), "test loss": ("relative", 0.01), "test accuracy": ("absolute", 0.006)}
OTHER_METRIC = ("relative", 0.01)  # another test metric ("test mae")
_FIGURE = re.compile(r"\b(final loss|test [a-z][a-z0-9 ]*?) (-?\d+\.\d+)\b")


def tolerate(new: str, saved: str) -> str:
    """``new`` with each figure (``FIGURES``) that lies within its tolerance of the same figure
    in ``saved`` written as ``saved`` writes it; the others, and any text whose figures are
    not the same ones in the same order, as they are."""
    if "workbench run " not in new or "workbench run " not in saved:  # not a run's check line
        return new
    got, want = list(_FIGURE.finditer(new)), list(_FIGURE.finditer(saved))
    if not got or [m.group(1) for m in got] != [m.group(1) for m in want]:
        return new
    parts, end = [], 0
    for g, w in zip(got, want):
        kind, tolerance = FIGURES.get(g.group(1), OTHER_METRIC)
        a, b = float(g.group(2)), float(w.group(2))
        close = abs(a - b) <= (tolerance * abs(b) if kind == "relative" else tolerance)
        parts.append(new[end:g.start(2)] + (w.group(2) if close else g.group(2)))
        end = g.end(2)
    return "".join(parts) + new[end:]


def sanitize(text: str) -> str:
    """``text`` as nbval compares it under the workbench's plugin (before a user's own patterns)."""
    for pattern, replacement in PATTERNS:
        text = pattern.sub(replacement, text)
    return text
