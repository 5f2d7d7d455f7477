"""Runs and clusters read back from their records under ``$WORKBENCH_HOME``, without a
kernel: the JupyterLab panel, ``wb.runs()``, ``wb.history()`` and ``%wb`` read them, so
they see runs started from any notebook or the CLI, after their kernel has gone."""

import os
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.common.pids import alive
from workbench.store import files
from workbench.store.layout import Home, RunDir
from workbench.store.schema import ClusterRecord, RunSummary, State, Status

if TYPE_CHECKING:
    import pandas as pd

SPARK_POINTS = 60  # loss points kept per run for the panel's sparkline


def _alive(pid: int | None) -> bool:
    return bool(pid) and alive(int(pid))


class _Tail:
    """The rows of one metrics file, read incrementally: only what was appended since the
    last read is parsed."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.steps = {}  # worker -> (step, loss, time) of its last row
        self.losses = []  # (step, loss) of every row, thinned
        self.recent = []  # (time, step) of the rows of the last few seconds

    def update(self) -> None:
        rows, self.offset = files.read_lines(self.path, self.offset)
        for row in rows:
            if "step" not in row:
                continue
            self.steps[row.get("worker", "")] = (row["step"], row.get("loss"), row.get("time", 0.0))
            if row.get("loss") is not None:
                self.losses.append((row["step"], row["loss"]))
            self.recent.append((row.get("time", 0.0), row["step"]))
        if len(self.losses) > 4 * SPARK_POINTS:
            self.losses = self.losses[::2]
        if self.recent:
            newest = self.recent[-1][0]
            self.recent = [r for r in self.recent if r[0] >= newest - 5.0]


class Records:
    """Reads every run and cluster under a workbench home; keeps per-file read offsets, so
    polling it every second costs only what was written since."""

    def __init__(self, home: str | os.PathLike | None = None) -> None:
        self.store = Home(home)
        self.home = self.store.path
        self._tails = {}

    def runs(self, limit: int = 50) -> list[RunSummary]:
        """The newest ``limit`` runs, newest first."""
        dirs = self.store.run_dirs()[:limit]
        listed = {str(d.path) for d in dirs}
        # forget the files of runs deleted or no longer among the newest: polling for hours
        # over many runs keeps only what it lists
        self._tails = {key: tail for key, tail in self._tails.items() if key[0] in listed}
        return [r for r in (self.run(d) for d in dirs) if r is not None]

    def run(self, run_dir: "str | os.PathLike | RunDir") -> RunSummary | None:
        """One run's summary, or None when its directory holds no record."""
        rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
        started = rd.read_run()
        result = rd.read_result()
        if started is None and result is None:
            return None
        record = {**(started or {}), **(result or {})}
        tails = []
        for path in rd.metrics_files():
            tail = self._tails.setdefault((str(rd.path), path.name), _Tail(path))
            tail.update()
            tails.append(tail)
        last = [s for t in tails for s in t.steps.values()]
        step = max((s[0] for s in last), default=0)
        losses = sorted(p for t in tails for p in t.losses)
        newest = max(last, key=lambda s: s[2], default=None)
        recent = sorted(r for t in tails for r in t.recent)
        steps_per_s = None
        if len(recent) >= 2 and recent[-1][0] > recent[0][0]:
            steps_per_s = (max(s for _, s in recent) - min(s for _, s in recent)) / (recent[-1][0] - recent[0][0])
        status: Status
        if result is not None:
            status = "failed" if result.get("error") else "stopped" if result.get("stopped") else "finished"
        elif started is not None and _alive(started.get("kernel_pid")):
            status = "running"
        else:
            status = "lost"  # its kernel died before the run could record an end
        stride = max(1, len(losses) // SPARK_POINTS)
        return {
            "run_id": rd.run_id,  # the directory: a resumed run keeps it
            "run_dir": str(rd.path),
            "status": status,
            "strategy": record.get("strategy"),
            "workers": record.get("workers"),
            "ps": record.get("ps"),
            "steps": record.get("steps"),
            "step": record.get("final_step") or step,  # final_step: written when the run ended
            "loss": newest[1] if newest else None,
            "steps_per_s": steps_per_s if status == "running" else None,
            "sparkline": [loss for _, loss in losses[::stride]][-SPARK_POINTS:],
            "error": record.get("error"),
            "notebook": record.get("notebook"),
            "tasks": record.get("tasks", []),
            "tensorboard": rd.tensorboard_dir.is_dir(),
        }

    def clusters(self) -> list[ClusterRecord]:
        """Clusters whose controller (or, when attached, kernel) is alive."""
        return [c for c in self.store.cluster_records()
                if _alive(c.get("controller_pid")) or (c.get("controller_pid") is None and _alive(c.get("kernel_pid")))]

    def state(self) -> State:
        return {"home": str(self.home), "clusters": self.clusters(), "runs": self.runs()}


def runs(home: str | os.PathLike | None = None) -> "pd.DataFrame":
    """The runs recorded under the workbench home (``$WORKBENCH_HOME``), newest first, as a
    DataFrame: whichever kernel, notebook or CLI started them, and whether or not it is
    still alive. ``status`` is running, finished, stopped, failed or lost (its kernel died
    before the run ended)."""
    import pandas as pd

    columns = ["run_id", "status", "strategy", "workers", "ps", "step", "steps", "loss", "error", "notebook",
               "run_dir"]
    return pd.DataFrame([{k: r[k] for k in columns} for r in Records(home).runs(limit=10**6)], columns=columns)


def history(run: str | os.PathLike, home: str | os.PathLike | None = None) -> "pd.DataFrame":
    """Every step row a run wrote (``metrics/*.jsonl``), as ``run.history`` has them, read
    from its run directory: ``run`` is a run id (under the workbench home) or a directory."""
    import pandas as pd

    from workbench.errors import invalid

    rd = RunDir(run) if Path(run).is_dir() else Home(home).run(str(run))
    if not rd.metrics_files():
        raise invalid("run", run, f"a run id or run directory with metrics/*.jsonl (looked in {rd.path})")
    rows = rd.read_metrics({})["rows"]
    if not rows:  # started, no step yet
        return pd.DataFrame(columns=["step", "worker", "loss", "accuracy", "examples_per_s", "step_time", "time"])
    return pd.DataFrame(rows).sort_values(["step", "worker"], kind="stable").reset_index(drop=True)
