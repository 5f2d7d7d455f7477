"""What the benchmarks share: where results go, the machine line of every table, a run's
steps/s as ``workbench.common.figures`` defines it, summaries, a thread's CPU, and a
workbench home of a benchmark's own (``own_home``).

The benchmarks are scripts (``python bench/NAME.py``): Python puts bench/ first on their
``sys.path``, so they import this module, and each other, by name."""

import contextlib
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results"


def machine() -> str:
    """This machine, as every table's header names it."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"


def steady(run) -> float:
    """The run's steps/s as the dashboard and the CLI give it (``workbench.common.figures``:
    over the last 80% of its steps, tracing and warm-up left out, as the peer times
    itself); NaN when the run is too short to measure."""
    from workbench.common import figures

    return figures.history_figures(run.history, run.job.global_batch_size, run.job.first_step)["steps_per_s"]


def summary(values) -> dict:
    """Median, min and max of ``values``; all NaN when one of them is (a run too short to
    measure: no figure is made up from the others)."""
    if any(v != v for v in values):
        nan = float("nan")
        return {"median": nan, "min": nan, "max": nan, "n": len(values)}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def thread_cpu(thread) -> float:
    """CPU seconds (user + system) a thread of this process has used, from /proc."""
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def testbed_or_skip(name: str, hosts: int):
    """``wb.testbed(hosts)``, or None once benchmark ``name`` has said why it cannot build one
    (no root, no openssh-server) and written that, and no numbers, as its results."""
    import json

    import workbench as wb

    try:
        return wb.testbed(hosts=hosts)
    except wb.TestbedError as e:
        print(f"{name} benchmark skipped: {e}")
        OUT.mkdir(exist_ok=True)
        (OUT / f"{name}.md").write_text(f"Skipped: {e}\n")
        (OUT / f"{name}.json").write_text(json.dumps({"skipped": str(e)}))
        return None


@contextlib.contextmanager
def own_home():
    """``WORKBENCH_HOME`` a temporary directory of its own inside the block (a calibration
    the machine's home must not keep), then as it was; yields the directory."""
    kept = os.environ.get("WORKBENCH_HOME")
    with tempfile.TemporaryDirectory() as home:
        os.environ["WORKBENCH_HOME"] = home
        try:
            yield home
        finally:
            if kept is None:
                os.environ.pop("WORKBENCH_HOME", None)
            else:
                os.environ["WORKBENCH_HOME"] = kept
