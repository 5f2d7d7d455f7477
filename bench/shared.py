"""What the benchmarks share: where results go, the machine line of every table, and the
steps/s, summary and thread-CPU helpers several of them use.

The benchmarks are scripts (``python bench/NAME.py``): Python puts bench/ first on their
``sys.path``, so they import this module, and each other, by name."""

import os
import platform
import statistics
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results"


def machine() -> str:
    """This machine, as every table's header names it."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"


def steady_steps_per_s(run) -> float:
    """Steps/s after the first fifth of a run's distinct steps (tracing and warm-up left out)."""
    h = run.history.drop_duplicates("step").sort_values("step")
    start = h[h.step >= max(2, int(len(h) * 0.2))].iloc[0]
    end = h.iloc[-1]
    return (end.step - start.step) / max(end.time - start.time, 1e-9)


def steady(run) -> float:
    """Steps/s over the last 80% of a run's steps (tracing and warm-up left out), as the
    plain-TF peer times itself (``peer_task.py``)."""
    times = sorted(run.history.drop_duplicates("step").time)
    start = max(1, len(times) // 5)
    return (len(times) - 1 - start) / max(times[-1] - times[start], 1e-9)


def summary(values) -> dict:
    """Median, min, max and count of a list of measurements."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def thread_cpu(thread) -> float:
    """CPU seconds (user + system) a thread of this process has used, from /proc."""
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
