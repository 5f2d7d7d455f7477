"""Launch a run: plan tasks, make their engines ready, ship the job, start each task."""

import os
import time
import uuid
from dataclasses import replace

from typing import Any

from workbench.common import strategies
from workbench.common.payload import dumps
from workbench.engine import entry
from workbench.errors import EngineError
from workbench.kernel.runs import files
from workbench.kernel.engines.pool import EnginesGone
from workbench.kernel.runs.handle import Run
from workbench.store import RunDir, RunRecord


def launch(cluster: Any, job: Any, resume: bool = False, steps: int | None = None, stall_timeout: float = 60.0,
           start_timeout: float = 180.0) -> Run:
    """Start ``job`` on ``cluster``'s engines and return its ``Run`` (``resume``: continue
    from the run directory's last checkpoint, up to ``steps``)."""
    spec = strategies.spec(job.strategy)
    tasks = cluster.pool.plan(spec.roles, job.workers, job.ps, spec.multi_engine, devices=job.devices)
    # new for each launch: what its engines build together is named after it (a strategy barrier)
    job = replace(job, launch=uuid.uuid4().hex[:8])
    if resume:
        job = replace(job, resume=True, steps=steps or job.steps, attempt=job.attempt + 1)
    run_dir = RunDir(job.run_dir)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    run_dir.clear_stop()
    if resume:  # the run is live again; its steps after the checkpoint will be done again
        run_dir.forget_end()
        # a profile asked of the earlier attempt is not this one's to trace (from step 0 again,
        # its fresh tasks traced it a second time, into the same directory)
        run_dir.profile_request_file.unlink(missing_ok=True)
        saved = run_dir.checkpoint_step()
        run_dir.truncate(saved or 0)
        # its figures count from here (common/figures.py): the pause before it is no training time
        job = replace(job, first_step=(saved or 0) + 1)
        if saved is None:  # lost before its first checkpoint: it starts again from step 0
            job = replace(job, resume=False)
    for attempt in range(2):
        job = replace(job, tasks=tasks)
        started = _write_record(cluster, job, tasks)
        # engines on hosts that do not share the kernel's files: warned about, and an event;
        # the job tells their chief to send its checkpoints here (``kernel/unshared.py``)
        try:
            unshared = cluster.pool.hosts_without(tasks, str(run_dir.path), started)
            break
        except EnginesGone:  # killed after the last run, unnoticed until asked: replaced, planned again
            if attempt:
                raise
            cluster.pool.heal()
            tasks = cluster.pool.plan(spec.roles, job.workers, job.ps, spec.multi_engine, devices=job.devices)
    job = replace(job, unshared_hosts=tuple(unshared))
    # cloudpickle ships functions defined in a notebook (__main__) by value, with their source
    # (common/payload.py); the same bytes in the run directory let any later kernel resume the
    # run (``Cluster.resume``)
    payload = dumps(job)
    run_dir.write_job(payload)
    if unshared and resume:  # their engines restore the checkpoint from their own disk
        files.push_run_files(cluster.client, [t for t in tasks if t.host in unshared], str(run_dir.path),
                              start_timeout)
    cluster.pool.mark(tasks)
    results = {}
    servers = [t for t in tasks if spec.servers and t.role != spec.chief_role]
    for t in servers:  # PS and worker servers first: the coordinator connects to them
        results[t.name] = cluster.client[t.engine_id].apply_async(entry.run_task, payload, t)
    for t in servers:
        try:
            results[t.name].get(timeout=start_timeout)
        except Exception as e:
            cluster.pool.condemn([s.engine_id for s in servers])
            raise EngineError(f"{t.name} (engine {t.engine_id}) could not start its TF server: {e}",
                              role=t.role, task=t.index, engine_id=t.engine_id,
                              remote_traceback=getattr(e, "traceback", "") or "") from None
    for t in tasks:
        if t not in servers:
            results[t.name] = cluster.client[t.engine_id].apply_async(entry.run_task, payload, t)
    ordered = {t.name: results[t.name] for t in tasks}
    if cluster.attached:  # its engines outlive this kernel: a later one re-attaches by message id
        record = run_dir.read_run()
        record["msg_ids"] = {name: ar.msg_ids[0] for name, ar in ordered.items()}
        record["session"] = cluster.client.session.session  # whose publishes they are (reattach.py)
        run_dir.write_run(record)
    run = Run(cluster, job, tasks, ordered, stall_timeout=stall_timeout, start_timeout=start_timeout,
              unshared=unshared)
    if unshared:
        run.note("run_dir_unshared", hosts=unshared, step=0)
    return run


def _write_record(cluster, job, tasks):
    """``run.json`` in the run directory: what started, where and from which notebook,
    for the Workbench panel and later kernels (``workbench.store``). Returns its start
    time (engines that see the file see that time in it)."""
    info = cluster.engine_info
    record: RunRecord = {
        "run_id": job.run_id, "attempt": job.attempt, "first_step": job.first_step, "strategy": job.strategy, "workers": job.workers, "ps": job.ps,
        "devices": job.devices, "steps": job.steps, "global_batch_size": job.global_batch_size,
        "steps_per_execution": job.steps_per_execution,
        "compression": job.compression, "average_every": job.average_every,
        "bytes_per_pack": job.bytes_per_pack, "gradient_delay": job.gradient_delay, "started": time.time(), "notebook": os.environ.get("JPY_SESSION_NAME"), "kernel_pid": os.getpid(),
        "profile": cluster.profile if cluster.attached else None,
        "tasks": [{"role": t.role, "index": t.index, "engine": t.engine_id, "host": info[t.engine_id].host,
                   "pid": info[t.engine_id].pid} for t in tasks],
    }
    RunDir(job.run_dir).write_run(record)
    return record["started"]
