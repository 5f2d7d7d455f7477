"""What runs and clusters leave on disk under ``$WORKBENCH_HOME``, read back without a kernel.

A run directory holds ``run.json`` (written at launch: strategy, topology, steps, the
notebook and kernel that started it, its tasks), ``job.pkl`` (the cloudpickled job: model,
data, loss and optimizer functions included, so that any kernel can resume it),
``metrics/<task>.jsonl`` (one row per step and worker, events), ``checkpoints/``,
``result.json`` and ``weights.npz`` (written when the run ends) and ``tensorboard/``.
A cluster started by a kernel keeps ``clusters/<id>.json`` (its engines and their roles)
while it runs. The JupyterLab panel and ``wb.runs()`` read these, so they see runs started
from any notebook or the CLI, after their kernel has gone.
"""

import json
import os
import time
from pathlib import Path

from workbench.kernel.processes import alive

SPARK_POINTS = 60  # loss points kept per run for the panel's sparkline


def write_json(path, record):
    """Write ``record`` to ``path`` atomically (readers never see half a file)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(path)


def _read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _alive(pid):
    return bool(pid) and alive(int(pid))


class _Tail:
    """The rows of one metrics file, read incrementally: only what was appended since the
    last read is parsed."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.steps = {}  # worker -> (step, loss, time) of its last row
        self.losses = []  # (step, loss) of every row, thinned
        self.recent = []  # (time, step) of the rows of the last few seconds

    def update(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1  # a line being written is read next time
        self.offset += end
        for line in chunk[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
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

    def __init__(self, home=None):
        from workbench.kernel import home as _home

        self.home = Path(home) if home is not None else _home.home()
        self._tails = {}

    def runs(self, limit=50):
        """The newest ``limit`` runs, newest first, as plain dicts."""
        runs_dir = self.home / "runs"
        try:
            dirs = sorted((d for d in runs_dir.iterdir() if d.is_dir()), key=lambda d: d.name, reverse=True)
        except OSError:
            return []
        dirs = dirs[:limit]
        listed = {str(d) for d in dirs}
        # forget the files of runs deleted or no longer among the newest: polling for hours
        # over many runs keeps only what it lists
        self._tails = {key: tail for key, tail in self._tails.items() if key[0] in listed}
        return [r for r in (self.run(d) for d in dirs) if r is not None]

    def run(self, run_dir):
        run_dir = Path(run_dir)
        started = _read_json(run_dir / "run.json")
        result = _read_json(run_dir / "result.json")
        if started is None and result is None:
            return None
        record = {**(started or {}), **(result or {})}
        tails = []
        for path in sorted((run_dir / "metrics").glob("*.jsonl")):
            tail = self._tails.setdefault((str(run_dir), path.name), _Tail(path))
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
        if result is not None:
            status = "failed" if result.get("error") else "stopped" if result.get("stopped") else "finished"
        elif started is not None and _alive(started.get("kernel_pid")):
            status = "running"
        else:
            status = "lost"  # its kernel died before the run could record an end
        stride = max(1, len(losses) // SPARK_POINTS)
        return {
            "run_id": run_dir.name,  # the directory: a resumed run keeps it
            "run_dir": str(run_dir),
            "status": status,
            "strategy": record.get("strategy"),
            "workers": record.get("workers"),
            "ps": record.get("ps"),
            "steps": record.get("steps"),
            "step": record.get("final_step") or step,  # final_step: written when the run ended
            "loss": newest[1] if newest else None,
            "steps_per_s": steps_per_s if status == "running" else None,
            "sparkline": [loss for _, loss in losses[::stride]][-SPARK_POINTS:],
            "started": record.get("started"),
            "finished": record.get("finished"),
            "error": record.get("error"),
            "notebook": record.get("notebook"),
            "kernel_pid": record.get("kernel_pid"),
            "tasks": record.get("tasks", []),
            "tensorboard": (run_dir / "tensorboard").is_dir(),
        }

    def clusters(self):
        """Clusters whose controller (or, when attached, kernel) is alive."""
        out = []
        for path in sorted((self.home / "clusters").glob("*.json")):
            c = _read_json(path)
            if c is None:
                continue
            if _alive(c.get("controller_pid")) or (c.get("controller_pid") is None and _alive(c.get("kernel_pid"))):
                out.append(c)
        return out

    def state(self):
        return {"time": time.time(), "home": str(self.home), "clusters": self.clusters(), "runs": self.runs()}


def runs(home=None):
    """The runs recorded under the workbench home (``$WORKBENCH_HOME``), newest first, as a
    DataFrame: whichever kernel, notebook or CLI started them, and whether or not it is
    still alive. ``status`` is running, finished, stopped, failed or lost (its kernel died
    before the run ended)."""
    import pandas as pd

    columns = ["run_id", "status", "strategy", "workers", "ps", "step", "steps", "loss", "error", "notebook",
               "run_dir"]
    return pd.DataFrame([{k: r[k] for k in columns} for r in Records(home).runs(limit=10**6)], columns=columns)


def checkpoint_step(run_dir):
    """The step of the run's last checkpoint (what a resume starts from), or None. Read from
    TensorFlow's ``checkpoints/checkpoint`` text file: no TensorFlow needed."""
    import re

    try:
        text = (Path(run_dir) / "checkpoints" / "checkpoint").read_text()
    except OSError:
        return None
    m = re.search(r'^model_checkpoint_path:\s*"[^"]*ckpt-(\d+)"', text, re.M)
    return int(m.group(1)) if m else None


def truncate(run_dir, step):
    """Drop the metrics rows and events after ``step`` (a resume starts after it): steps an
    interrupted attempt did past its last checkpoint are done again, and the history keeps
    each step once."""
    for path in sorted((Path(run_dir) / "metrics").glob("*.jsonl")):
        kept = []
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short when its engine or kernel died
            at = row["step"] if "step" in row else (row.get("event") or {}).get("step")
            if at is None or at <= step:
                kept.append(line + "\n")
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(kept))
        tmp.replace(path)


def history(run, home=None):
    """Every step row a run wrote (``metrics/*.jsonl``), as ``run.history`` has them, read
    from its run directory: ``run`` is a run id (under the workbench home) or a directory."""
    import pandas as pd

    from workbench.errors import invalid

    run_dir = Path(run)
    if not run_dir.is_dir():
        run_dir = (Path(home) if home is not None else Records().home) / "runs" / str(run)
    files = sorted((run_dir / "metrics").glob("*.jsonl"))
    if not files:
        raise invalid("run", run, f"a run id or run directory with metrics/*.jsonl (looked in {run_dir})")
    rows = []
    for path in files:
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short when its engine died
            if "step" in row:
                rows.append(row)
    if not rows:  # started, no step yet
        return pd.DataFrame(columns=["step", "worker", "loss", "accuracy", "examples_per_s", "step_time", "time"])
    return pd.DataFrame(rows).sort_values(["step", "worker"], kind="stable").reset_index(drop=True)
