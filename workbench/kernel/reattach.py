"""Find the live ``Run`` behind a run directory, for ``wb.load``: one this kernel is
watching already, or one still training on an attached cluster (``wb.Cluster(profile=...)``)
whose kernel went away. Engines of such a cluster outlive kernels, and ipyparallel's hub
keeps every task's result: the run is watched again through its tasks' message ids
(``run.json``), its rows read back from its metrics files."""

import threading
import time
from pathlib import Path

from workbench.store import RunDir


def find(run_dir):
    from workbench.kernel.cluster import _LIVE

    run_dir = Path(run_dir).resolve()
    for cluster in list(_LIVE):
        for run in reversed(cluster.runs):
            if Path(run.run_dir).resolve() == run_dir:
                return run
    started = RunDir(run_dir).read_run() or {}
    msg_ids = started.get("msg_ids")
    if not msg_ids or started.get("profile") is None or RunDir(run_dir).ended():
        return None
    for cluster in list(_LIVE):
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


def _reattach(cluster, run_dir, started, msg_ids):
    import cloudpickle
    import ipyparallel as ipp

    from workbench.common import roles
    from workbench.kernel.recorded import read_metrics
    from workbench.kernel.run import Run

    job = cloudpickle.loads(RunDir(run_dir).read_job())
    pids = {(t["role"], t["index"]): t.get("pid") for t in started.get("tasks", [])}
    for t in job.tasks:  # the run's engines, busy when this kernel attached, join the inventory
        if t.engine_id not in cluster._info:
            address, _, port = t.target.rpartition(":")
            cluster._info[t.engine_id] = roles.EngineInfo(
                id=t.engine_id, host=t.host, address=address or t.host, pid=pids.get((t.role, t.index)) or 0,
                port=int(port or 0))
        cluster._state[t.engine_id] = roles.fingerprint(t)
        cluster._busy.discard(t.engine_id)
    # the run's watcher thread polls the hub: on a client of its own (clients are not thread-safe)
    watcher = ipp.Client(profile=cluster.profile, cluster_id=cluster._find_cluster_id())
    results = {t.name: watcher.get_result(msg_ids[t.name], block=False) for t in job.tasks}
    run = Run(cluster, job, job.tasks, results, stall_timeout=60.0, start_timeout=180.0)
    run._started = started.get("started") or time.time()
    offsets = {}
    run._tail = lambda: run._merge(read_metrics(run_dir, offsets))
    cluster.runs.append(run)

    def close():
        run._done.wait()
        watcher.close()

    threading.Thread(target=close, name=f"workbench-reattached-{run.id}", daemon=True).start()
    return run
