"""The paths this machine's engines talk over, as ``wb.calibrate_links`` measured them with
TF's own collectives: ``<workbench home>/calibration.json``, read by ``run.explain()`` and
``wb.predict`` in place of the cost model's built-in constants, on the machine that
measured them only (same CPU model and number of cores).

    {"machine": "AMD EPYC 7B13 x 2 cores",
     "paths": {"loopback": {"alpha_s": 0.0005, "cpu_s_per_byte": 3.1e-09, "workers": 2,
                            "measured": 1795750000.0, "runs": ["20261127-..."]},
               "veth": {...}}}

A path's ``alpha_s`` is the seconds one message of a ring waits before its bytes,
``cpu_s_per_byte`` the seconds of a core the ring's bytes cost, both measured with
``workers`` engines sharing the machine's cores and converted to one engine's core alone.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from workbench.store import files
from workbench.store.layout import home

PATHS = ("loopback", "veth")  # one machine's loopback; the unshaped links between a test bed's hosts


def path() -> Path:
    """Where the calibration is kept: ``calibration.json`` in the workbench home."""
    return home() / "calibration.json"


@functools.cache  # a process's machine does not change
def machine() -> str:
    """This machine's CPU model and core count: a calibration holds on the machine it names."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model or 'unknown CPU'} x {os.cpu_count()} cores"


def read() -> dict[str, dict[str, Any]]:
    """{path: its measured figures} calibrated on this machine; {} when none was, or the
    file names another machine."""
    record = files.read_json(path())
    if not isinstance(record, dict) or record.get("machine") != machine():
        return {}
    return {k: v for k, v in (record.get("paths") or {}).items() if k in PATHS and isinstance(v, dict)}


def write(name: str, figures: dict[str, Any]) -> Path:
    """Keep ``figures`` as path ``name``'s, beside the other paths measured on this machine."""
    if name not in PATHS:
        raise ValueError(f"unknown path {name!r}: one of {PATHS}")
    paths = read()
    paths[name] = figures
    path().parent.mkdir(parents=True, exist_ok=True)
    files.write_json(path(), {"machine": machine(), "paths": paths})
    return path()
