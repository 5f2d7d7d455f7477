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


def sanitize(text: str) -> str:
    """``text`` as nbval compares it under the workbench's plugin (before a user's own patterns)."""
    for pattern, replacement in PATTERNS:
        text = pattern.sub(replacement, text)
    return text
