"""Where everything lives under ``$WORKBENCH_HOME``: ``Home`` names its folders and the
cluster records, ``RunDir`` every file of one run directory. Nothing else spells these
paths."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.common.pids import identities
from workbench.store import files
from workbench.store.schema import ClusterRecord, ResultRecord, RunRecord

if TYPE_CHECKING:
    from workbench.common.protocols import Metrics


def home() -> Path:
    """``$WORKBENCH_HOME``, or ``~/.workbench``: never the user's own IPython directory."""
    return Path(os.environ.get("WORKBENCH_HOME") or Path.home() / ".workbench")


class Home:
    """The workbench home: ``runs/<run id>/`` (one ``RunDir`` each), ``clusters/<id>.json``
    (``ClusterRecord``) and ``clusters/<id>.pids`` (the PIDs a kernel's reaper ends),
    ``ipython/profile_workbench/`` (the ipyparallel profile of local clusters)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else home()

    def __repr__(self) -> str:
        return f"Home({str(self.path)!r})"

    @property
    def runs_dir(self) -> Path:
        return self.path / "runs"

    @property
    def clusters_dir(self) -> Path:
        return self.path / "clusters"

    @property
    def profile_dir(self) -> Path:
        return self.path / "ipython" / "profile_workbench"

    def run(self, run_id: str) -> "RunDir":
        return RunDir(self.runs_dir / run_id)

    def run_dirs(self) -> list["RunDir"]:
        """Every run directory, newest first (run ids start with their start time)."""
        try:
            dirs = [d for d in self.runs_dir.iterdir() if d.is_dir()]
        except OSError:
            return []
        return [RunDir(d) for d in sorted(dirs, key=lambda d: d.name, reverse=True)]

    # -- cluster records ----------------------------------------------------------------
    def cluster_record(self, cluster_id: str) -> Path:
        return self.clusters_dir / f"{cluster_id}.json"

    def pidfile(self, cluster_id: str) -> Path:
        return self.clusters_dir / f"{cluster_id}.pids"

    def write_cluster(self, record: ClusterRecord) -> Path:
        """Write (or replace) a cluster's record; returns its path."""
        path = self.cluster_record(record["id"])
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_json(path, record)
        return path

    def cluster_records(self) -> list[ClusterRecord]:
        """Every cluster record on disk, alive or not, by id."""
        out = []
        for path in sorted(self.clusters_dir.glob("*.json")):
            record = files.read_json(path)
            if record is not None:
                out.append(record)
        return out

    def write_pids(self, cluster_id: str, pids: set[int]) -> Path:
        self.clusters_dir.mkdir(parents=True, exist_ok=True)
        files.write_text(self.pidfile(cluster_id), identities(pids))  # PID:START each: the reaper checks both
        return self.pidfile(cluster_id)


KERNEL = "kernel"  # metrics/kernel.jsonl: the events of the kernel that watched the run


class RunDir:
    """One run directory: ``run.json`` (``RunRecord``, written at launch), ``job.pkl`` (the
    cloudpickled job, so that any kernel can resume it), ``metrics/<task>.jsonl`` (a row per
    step and worker, and events), ``metrics/kernel.jsonl`` (the events the kernel watching
    the run noted: workers lost and replaced, faults injected on a test bed),
    ``logs/<task>.log`` (the task's stdout and stderr, ``common/logs.py``), ``links.jsonl``
    (a run on a test bed: its links' samples), ``checkpoints/``, ``tensorboard/``, ``STOP``
    (asks every task to stop at its next agreed step), and once the run has ended
    ``result.json`` (``ResultRecord``) and ``weights.npz``. Whole files are written
    atomically; the metrics and log files are appended to, a line at a time, by their task
    (or kernel) alone."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def run_id(self) -> str:
        return self.path.name

    # -- paths --------------------------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def result_json(self) -> Path:
        return self.path / "result.json"

    @property
    def job_pkl(self) -> Path:
        return self.path / "job.pkl"

    @property
    def weights_npz(self) -> Path:
        return self.path / "weights.npz"

    @property
    def stop_file(self) -> Path:
        return self.path / "STOP"

    @property
    def metrics_dir(self) -> Path:
        return self.path / "metrics"

    def metrics_file(self, task: str) -> Path:
        """The rows and events of task ``task`` ("worker:0")."""
        return self.metrics_dir / f"{task}.jsonl"

    def metrics_files(self) -> list[Path]:
        return sorted(self.metrics_dir.glob("*.jsonl"))

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    def log_file(self, task: str) -> Path:
        """The stdout and stderr lines of task ``task`` ("worker:0")."""
        return self.logs_dir / f"{task}.log"

    def log_files(self) -> list[Path]:
        return sorted(self.logs_dir.glob("*.log"))

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / "tensorboard"

    def exists(self) -> bool:
        """Is this a run's directory (its ``run.json`` written)?"""
        return self.run_json.exists()

    # -- stopping -----------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask every task of the run to stop at its next agreed step (they poll
        ``stop_requested``), keeping a checkpoint. Whoever asks: notebook, CLI, panel."""
        self.stop_file.touch()

    def stop_requested(self) -> bool:
        return self.stop_file.exists()

    def clear_stop(self) -> None:
        """Before a (re)launch: a stop asked of an earlier attempt does not stop this one."""
        self.stop_file.unlink(missing_ok=True)

    # -- profiling (``Run.profile``) -----------------------------------------------------
    @property
    def profile_request_file(self) -> Path:
        return self.path / "PROFILE"

    @property
    def profiles_dir(self) -> Path:
        return self.path / "profile"

    def profile_dir(self, request: int, task: str) -> Path:
        """Where task ``task`` ("worker:0") writes the trace of profile request ``request``."""
        return self.profiles_dir / str(request) / task.replace(":", "-")

    def request_profile(self, request: int, start: int, steps: int) -> None:
        """Ask every task to trace ``steps`` steps from step ``start`` (they poll
        ``profile_request``): request ``request`` (a number the run has not used)."""
        files.write_json(self.profile_request_file, {"id": request, "start": start, "steps": steps})

    def profile_request(self) -> dict | None:
        """The last profile request ({"id", "start", "steps"}), or None."""
        return files.read_json(self.profile_request_file)

    # -- stacks asked from outside the kernel (the Workbench panel) --------------------------
    @property
    def stacks_request_file(self) -> Path:
        return self.path / "STACKS"

    @property
    def stacks_json(self) -> Path:
        return self.path / "stacks.json"

    def request_stacks(self) -> str:
        """Ask the kernel watching the run for every task's stacks (its watcher polls
        ``stacks_requested``); returns the request's id, which its answer carries."""
        request = f"{time.time():.6f}-{os.getpid()}"
        files.write_json(self.stacks_request_file, {"id": request})
        return request

    def stacks_requested(self) -> str | None:
        """The id of a request for stacks not taken yet, or None ("" for a request file that
        holds no id: not written by ``request_stacks``, whose writes are atomic)."""
        if not self.stacks_request_file.exists():  # a stat per watcher poll: the usual case
            return None
        request = files.read_json(self.stacks_request_file)
        return str(request.get("id") or "") if isinstance(request, dict) else ""

    def claim_stacks(self) -> str | None:
        """The watcher takes the request for stacks, if any: its file moved aside in one step
        (a request written meanwhile stays for the next poll), read and removed. None when
        there is none or it holds no id."""
        if not self.stacks_request_file.exists():  # a stat per watcher poll: the usual case
            return None
        claimed = self.stacks_request_file.with_name(f"{self.stacks_request_file.name}.{os.getpid()}.claimed")
        try:
            os.replace(self.stacks_request_file, claimed)
        except FileNotFoundError:  # withdrawn by its requester meanwhile
            return None
        request = files.read_json(claimed)
        claimed.unlink(missing_ok=True)
        request = request.get("id") if isinstance(request, dict) else None
        return str(request) if request else None

    def answer_stacks(self, request: str, tasks: list[dict]) -> None:
        """The answer to a claimed request: a dict per task (``hangs.TaskStacks.record``)."""
        files.write_json(self.stacks_json, {"id": request, "time": time.time(), "tasks": tasks})

    def withdraw_stacks(self, request: str) -> None:
        """A requester that stops waiting removes its request, if it is still the one there
        (another requester's newer one stays)."""
        if self.stacks_requested() == request:
            self.stacks_request_file.unlink(missing_ok=True)

    def stacks_answer(self, request: str) -> dict | None:
        """The answer to request ``request``, or None until it is written."""
        answer = files.read_json(self.stacks_json)
        return answer if answer and answer.get("id") == request else None

    # -- records ------------------------------------------------------------------------
    def read_run(self) -> RunRecord | None:
        return files.read_json(self.run_json)

    def write_run(self, record: RunRecord) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        files.write_json(self.run_json, record)

    def read_result(self) -> ResultRecord | None:
        return files.read_json(self.result_json)

    def write_result(self, record: ResultRecord) -> None:
        files.write_json(self.result_json, record)

    def ended(self) -> bool:
        """Has the kernel that watched the run recorded its end?"""
        return self.result_json.exists()

    def write_job(self, payload: bytes) -> None:
        files.write_bytes(self.job_pkl, payload)

    def read_job(self) -> bytes:
        return self.job_pkl.read_bytes()

    def write_weights(self, weights: list[Any]) -> None:
        """The final weights, as numpy arrays in ``run.weights()`` order."""
        import io

        import numpy as np

        buffer = io.BytesIO()
        np.savez(buffer, *weights)
        files.write_bytes(self.weights_npz, buffer.getvalue())

    def read_weights(self) -> list[Any] | None:
        """The final weights, or None when the run ended without them (lost, failed)."""
        import numpy as np

        try:
            with np.load(self.weights_npz) as f:
                return [f[f"arr_{i}"] for i in range(len(f.files))]
        except FileNotFoundError:
            return None

    def forget_end(self) -> None:
        """The run is live again (a resume): its end and final weights are no longer true."""
        self.result_json.unlink(missing_ok=True)
        self.weights_npz.unlink(missing_ok=True)

    # -- checkpoints and metrics --------------------------------------------------------
    def checkpoint_step(self) -> int | None:
        """The step of the run's last checkpoint (what a resume starts from), or None. Read
        from TensorFlow's ``checkpoints/checkpoint`` text file: no TensorFlow needed."""
        try:
            text = (self.checkpoints_dir / "checkpoint").read_text()
        except OSError:
            return None
        m = re.search(r'^model_checkpoint_path:\s*"[^"]*ckpt-(\d+)"', text, re.M)
        return int(m.group(1)) if m else None

    def read_metrics(self, offsets: dict[str, int]) -> Metrics:
        """The rows and events appended to the metrics files since ``offsets`` (per-file
        read offsets, updated in place): ``{"rows": [...], "events": [...]}``."""
        rows, events = [], []
        for path in self.metrics_files():
            read, offsets[path.name] = files.read_lines(path, offsets.get(path.name, 0))
            for row in read:
                if "step" in row:
                    rows.append(row)
                elif "event" in row:
                    events.append(row["event"])
        return {"rows": rows, "events": events}

    def read_logs(self, offsets: dict[str, int]) -> dict[str, list[tuple[float, str, str]]]:
        """``{task: [(time, stream, text), ...]}``: the lines appended to the log files since
        ``offsets`` (per-file read offsets, updated in place), complete lines only."""
        from workbench.common.logs import parse

        out = {}
        for path in self.log_files():
            text, offsets[path.name] = files.read_text_lines(path, offsets.get(path.name, 0))
            if text:
                out[path.name[:-len(".log")]] = parse(text)
        return out

    def append_logs(self, task: str, lines: list[tuple[float, str, str]]) -> None:
        """Append ``lines`` ((time, stream, text)) to task ``task``'s log file, as its engine
        writes them: what a kernel received from a task whose host does not see this directory."""
        from workbench.common.logs import format_line

        if not lines:
            return
        path = self.log_file(task)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(format_line(*line) for line in lines))

    def written_by(self, task: str, chief: bool) -> list[str]:
        """What task ``task`` writes here (paths relative to the directory): its metrics and
        log files and, the run's chief, checkpoints, TensorBoard logs and profiles."""
        parts = [str(self.metrics_file(task).relative_to(self.path)), str(self.log_file(task).relative_to(self.path))]
        if chief:
            parts += [d.name for d in (self.checkpoints_dir, self.tensorboard_dir, self.profiles_dir)]
        return parts

    def checkpoint_parts(self, step: int) -> list[str]:
        """What the chief sends to a kernel that does not see this directory when it saves
        the checkpoint of ``step`` (relative paths): that checkpoint's files, the TensorBoard
        logs, and TensorFlow's ``checkpoint`` state file last (written last, it never names a
        checkpoint whose files are not there yet)."""
        ckpts = self.checkpoints_dir
        parts = [str(f.relative_to(self.path)) for f in sorted(ckpts.glob(f"ckpt-{step}.*")) if f.is_file()]
        return parts + [self.tensorboard_dir.name, str((ckpts / "checkpoint").relative_to(self.path))]

    def prune_checkpoints(self) -> list[str]:
        """Delete the checkpoints the ``checkpoint`` state file no longer lists (TensorFlow's
        manager keeps the last few where it saves; a copy of them kept elsewhere follows it).
        Returns the names deleted."""
        try:
            text = (self.checkpoints_dir / "checkpoint").read_text()
        except OSError:
            return []
        kept = {int(m) for m in re.findall(r'^all_model_checkpoint_paths:\s*"[^"]*ckpt-(\d+)"', text, re.M)}
        kept |= {s for s in [self.checkpoint_step()] if s is not None}
        deleted = []
        for f in self.checkpoints_dir.glob("ckpt-*"):
            m = re.match(r"ckpt-(\d+)\.", f.name)
            if m and int(m.group(1)) not in kept:
                f.unlink(missing_ok=True)
                deleted.append(f.name)
        return sorted(deleted)

    def append_metrics(self, task: str, rows: list[Any], events: list[Any]) -> None:
        """Append ``rows`` and ``events`` to task ``task``'s metrics file, in the lines its
        engine writes (``engine/metrics.Publisher``): what a kernel received through
        ipyparallel from a task whose host does not see this directory."""
        import json

        if not rows and not events:
            return
        path = self.metrics_file(task)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write("".join([json.dumps(r) + "\n" for r in rows] + [json.dumps({"event": e}) + "\n" for e in events]))

    def append_kernel_event(self, event: Any) -> None:
        """Append an event the kernel watching the run noted to ``metrics/kernel.jsonl``,
        where ``read_metrics`` reads it back with the tasks' own (``wb.load``, a kernel
        that re-attaches the run)."""
        self.append_metrics(KERNEL, [], [event])

    @property
    def links_file(self) -> Path:
        return self.path / "links.jsonl"

    def append_links(self, samples: list[Any]) -> None:
        """Append link samples of a run on a test bed (``kernel/links.py``'s rows: time,
        host, bytes sent, bytes received, rate), a line each."""
        import json

        if samples:
            with open(self.links_file, "a") as f:
                f.write("".join(json.dumps(list(s)) + "\n" for s in samples))

    def read_links(self, offset: int = 0) -> tuple[list[Any], int]:
        """The link samples appended since byte ``offset``, and the offset to read from next."""
        return files.read_lines(self.links_file, offset)

    def read_by(self, task: str) -> list[str]:
        """What task ``task`` reads here when it starts (relative paths): the checkpoints a
        resume restores, and its metrics and log files, which it appends to (the kernel's
        copy of each is replaced by the host's at the end)."""
        return [self.checkpoints_dir.name, str(self.metrics_file(task).relative_to(self.path)),
                str(self.log_file(task).relative_to(self.path))]

    def truncate(self, step: int) -> None:
        """Drop the metrics rows and events after ``step`` (a resume starts after it): steps
        an interrupted attempt did past its last checkpoint are done again, and the history
        keeps each step once."""
        import json

        for path in self.metrics_files():
            kept = []
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut short when its engine or kernel died
                at = row["step"] if "step" in row else (row.get("event") or {}).get("step")
                if at is None or at <= step:
                    kept.append(line + "\n")
            files.write_text(path, "".join(kept))
