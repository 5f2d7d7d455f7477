"""Find the live ``Run`` behind a run directory, for ``wb.load``: one this kernel is
watching already, or one still training on an attached cluster (``wb.Cluster(profile=...)``)
whose kernel went away. Engines of such a cluster outlive kernels, and ipyparallel's hub
keeps every task's result: the run is watched again through its tasks' message ids
(``run.json``), its rows read back from its metrics files."""

import os
import threading
from pathlib import Path
from typing import Any

from workbench.store import RunDir
from workbench.kernel.engines import live
from workbench.kernel.runs.handle import Run


def find(run_dir: str | Path) -> Run | None:
    """The live ``Run`` of ``run_dir``, or None."""
    run_dir = Path(run_dir).resolve()
    for cluster in live.clusters():
        for run in reversed(cluster.runs):
            if Path(run.run_dir).resolve() == run_dir:
                return run
    started = RunDir(run_dir).read_run() or {}
    msg_ids = started.get("msg_ids")
    if not msg_ids or started.get("profile") is None or RunDir(run_dir).ended():
        return None
    for cluster in live.clusters():
        if cluster.attached and cluster.running and cluster.profile == started["profile"] and _known(cluster, msg_ids):
            return _reattach(cluster, run_dir, started, msg_ids)
    return None


def _known(cluster, msg_ids):
    """Does this cluster's hub know the run's tasks (pending or done)?"""
    try:
        status = cluster.client.result_status(list(msg_ids.values()), status_only=True)
    except Exception:  # unknown message ids: another cluster in the same profile
        return False
    return len(status.get("pending", ())) + len(status.get("completed", ())) == len(msg_ids)


def _reattach(cluster: Any, run_dir: Path, started: dict, msg_ids: dict[str, str]) -> Run:
    import cloudpickle

    job = cloudpickle.loads(RunDir(run_dir).read_job())
    pids = {(t["role"], t["index"]): t.get("pid") for t in started.get("tasks", [])}
    # the run's engines, busy when this kernel attached, join the inventory
    cluster.pool.adopt(job.tasks, pids)
    # the run's watcher thread polls the hub: on a client of its own (clients are not thread-safe)
    watcher = cluster.new_client()
    if started.get("session"):  # a client drops IOPub messages of other sessions: the tasks' publishes
        watcher.session.session = started["session"]  # (rows, checkpoints for hosts without the run dir)
    results = {t.name: watcher.get_result(msg_ids[t.name], block=False) for t in job.tasks}
    offsets = {}
    # hosts without the run directory: this kernel now keeps its copy current and forwards a STOP file
    run = Run(cluster, job, job.tasks, results, stall_timeout=60.0, start_timeout=180.0,
              started=started.get("started"), tail=lambda: RunDir(run_dir).read_metrics(offsets),
              unshared=job.unshared_hosts)
    cluster.runs.append(run)
    # this kernel watches it now: the records (wb.runs(), the panel, the CLI's stop) say running again
    started.update(kernel_pid=os.getpid(), notebook=os.environ.get("JPY_SESSION_NAME"))
    RunDir(run_dir).write_run(started)

    def close():
        run.join()
        watcher.close()

    threading.Thread(target=close, name=f"workbench-reattached-{run.id}", daemon=True).start()
    return run
