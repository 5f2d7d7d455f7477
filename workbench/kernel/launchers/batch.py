"""ipyparallel's MPI and Slurm engine launchers, set up to start workbench engines, and
what the kernel does differently with their engines.

- **MPI** (``launcher="mpi"``): the engines are the ranks of one ``mpiexec`` job, started
  here (``mpiexec`` is a local process; ranks on other hosts run under its daemons, reached
  over SSH). Killing one rank aborts the whole job, so an MPI engine set is never recycled
  engine by engine: it is restarted whole (``restart_mpi``), its engines on the same hosts
  and TF ports as before. ``stop()`` ends the job through ``mpiexec`` (SIGTERM, which
  takes its ranks on every host down), never rank by rank.
- **Slurm** (``launcher="slurm"``): the engines are the tasks of one ``sbatch`` job
  (``srun``); their PIDs are the nodes', never killed from here: ``stop()`` cancels the job.
  A task that dies leaves the others running (Slurm ends a step for a dead task only with
  ``--kill-on-bad-exit``); replacements are tasks of new jobs, each on its predecessor's
  node (``start_slurm_engines``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from workbench.errors import ClusterError

if TYPE_CHECKING:
    import ipyparallel

MPI = ("mpi", "mpiexec")
SLURM = ("slurm",)


def configure(options: dict[str, Any], launcher: str | None, timeout: float) -> None:
    """Set ipyparallel's MPI or Slurm engine launcher in ``options`` (``ipyparallel.Cluster``'s
    keywords) to run workbench engines (TensorFlow imported while they register)."""
    from traitlets.config import Config

    config = options.setdefault("config", Config())
    section = {"mpi": "MPIEngineSetLauncher", "mpiexec": "MPIEngineSetLauncher",
               "slurm": "SlurmEngineSetLauncher"}.get(launcher)
    if section is None:
        return
    if "engine_cmd" not in config[section]:
        # ipyparallel adds --mpi for MPI engines: engine id = rank (mpi4py on the engines)
        # no nanny: it outlives an engine that mpiexec or Slurm ends (seen left on the
        # hosts after stop()); the controller's heartbeat notices a dead engine anyway
        config[section].engine_cmd = [sys.executable, "-m", "workbench.engine.startup.start",
                                      f"--IPEngine.wait_for_url_file={timeout}", "--IPEngine.enable_nanny=False"]
    if launcher in SLURM and "batch_file_name" not in config[section]:
        # ipyparallel writes the batch script into the working directory (a user's notebook
        # folder): into the workbench's profile instead, one a cluster object
        import uuid

        from workbench.kernel.launchers import home

        config[section].batch_file_name = str(home.profile_dir() / f"slurm_engines-{uuid.uuid4().hex[:8]}.sbatch")
    if launcher in MPI:
        _require_mpi4py()
        if "mpi_args" not in config.MPILauncher and "mpi_args" not in config.MPIEngineSetLauncher:
            config.MPILauncher.mpi_args = local_mpi_args()
    options.setdefault("delay", 0)


def local_mpi_args() -> list[str]:
    """``mpiexec`` arguments for ranks on this machine: as root (containers, CI) and with
    more ranks than cores, unbound (Open MPI binds each rank to one core by default, and
    each host's daemon binds its own: TensorFlow would see one core, the same one per host)."""
    return (["--allow-run-as-root"] if os.geteuid() == 0 else []) + ["--oversubscribe", "--bind-to", "none"]


def _require_mpi4py():
    try:
        import mpi4py  # noqa: F401
    except ImportError as e:
        raise ClusterError('launcher="mpi" starts engines with ipyparallel\'s --mpi (engine id = MPI rank), '
                           "which needs mpi4py: pip install mpi4py (and Open MPI: apt-get install openmpi-bin)") from e


def exited_engine_processes(ipp_cluster: ipyparallel.Cluster) -> int:
    """How many local engine processes (engines, ``mpiexec``) of ``ipp_cluster``'s launchers
    have ended. ipyparallel notices them only while its event loop runs, which it does not
    while the kernel waits for engines to register. (Their exit codes are lost: the
    launchers' watch threads reap them.)"""
    ended = 0
    for engine_set in ipp_cluster.engines.values():
        children = getattr(engine_set, "launchers", None)
        for launcher in [engine_set, *(children.values() if isinstance(children, dict) else [])]:
            process = getattr(launcher, "_popen_process", None)  # local launchers' Popen
            ended += process is not None and process.poll() is not None
    return ended


def is_mpi(ipp_cluster: ipyparallel.Cluster | None) -> bool:
    if ipp_cluster is None:
        return False
    from ipyparallel.cluster.launcher import MPIEngineSetLauncher

    return any(isinstance(s, MPIEngineSetLauncher) for s in ipp_cluster.engines.values())


def end_mpi_jobs(ipp_cluster: ipyparallel.Cluster, deadline: float = 10.0) -> list[int]:
    """SIGTERM every ``mpiexec`` of the cluster's engine sets and wait until each has exited:
    ``mpiexec`` passes the signal to its ranks on every host and takes its remote daemons
    down with it. Returns the PIDs still alive at the deadline (the caller SIGKILLs them)."""
    from ipyparallel.cluster.launcher import MPIEngineSetLauncher

    from workbench.kernel.engines.processes import alive

    pids = [s.pid for s in ipp_cluster.engines.values()
            if isinstance(s, MPIEngineSetLauncher) and isinstance(s.pid, int) and s.pid > 0 and alive(s.pid)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + deadline
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def refuse_under_run(runs: Iterable[Any], engine_ids: Collection[int]) -> None:
    """An MPI job is restarted only whole: not while a run of the cluster uses it."""
    running = next((r for r in runs if not r.done), None)
    if running is not None:
        raise ClusterError(
            f"Engines {sorted(engine_ids)} need replacing, but this cluster's engines are the ranks of one "
            f"mpiexec job, restarted only whole, and run {running.id} is still using them: stop it first.")


def restart_mpi(ipp: ipyparallel.Cluster, client: ipyparallel.Client, old_ids: Collection[int], n: int,
                timeout: float) -> None:
    """Recycling on an MPI cluster: the ``mpiexec`` job is restarted whole (one rank cannot
    be replaced: killing it aborts the job). Returns when the old ranks have unregistered
    and ``n`` ranks of the new job have registered; their ids are the old ones (rank = id),
    and the pool gives each the TF port its predecessor had on its host."""
    from workbench.kernel.engines.processes import family, reap, wait_until

    stuck = end_mpi_jobs(ipp)
    reap(family(stuck), deadline=0)
    wait_until(lambda: not set(old_ids) & set(client.ids), timeout,
               lambda: f"the old MPI engines {sorted(old_ids)} to unregister; registered: {client.ids}")
    for key in list(ipp.engines):  # the finished job's launchers out of the way
        ipp.engines.pop(key)
    ipp.start_engines_sync(n=n)
    wait_until(lambda: len(client.ids) >= n, timeout,
               lambda: f"{n} engines of the new mpiexec job; registered: {client.ids}")


def is_slurm(ipp_cluster: ipyparallel.Cluster | None) -> bool:
    if ipp_cluster is None:
        return False
    from ipyparallel.cluster.launcher import SlurmEngineSetLauncher

    return any(isinstance(s, SlurmEngineSetLauncher) for s in ipp_cluster.engines.values())


def start_slurm_engines(ipp_cluster: ipyparallel.Cluster, hosts: Iterable[str]) -> None:
    """Recycling on a Slurm cluster: an engine for each of ``hosts`` (its predecessor's,
    as the engine reported it), each host's a job of its own pinned to that node
    (``sbatch --nodelist``). A job left to Slurm's choice lands on any node (on the bed: h1
    for a worker of h3), where a parameter-server worker's replacement would listen on an
    address other than the one its peers dial."""
    from collections import Counter

    from ipyparallel.cluster.launcher import SlurmEngineSetLauncher

    first = next(s for s in ipp_cluster.engines.values() if isinstance(s, SlurmEngineSetLauncher))
    submit = [a for a in first.submit_command if not a.startswith("--nodelist=")]
    for host, n in Counter(hosts).items():
        ipp_cluster.start_engines_sync(n=n, submit_command=[*submit, f"--nodelist={host}"])


def end_slurm_jobs(ipp_cluster: ipyparallel.Cluster, deadline: float = 30.0) -> list[str]:
    """Cancel the cluster's Slurm engine jobs (the launcher's own ``scancel``) and wait until
    ``squeue`` no longer lists them, so that ``stop()`` returns with the engines gone and
    their nodes free; their engine sets leave the cluster (nothing left to stop). Returns
    the job ids still listed at the deadline."""
    import subprocess

    from ipyparallel.cluster.launcher import SlurmEngineSetLauncher

    sets = {key: s for key, s in ipp_cluster.engines.items()
            if isinstance(s, SlurmEngineSetLauncher) and s.job_id and s.state == "running"}
    for key, s in sets.items():
        # engines whose TF runtime holds collectives or servers take seconds to exit when
        # asked; their runs are over and saved: SIGKILL the job's steps, then cancel it
        for end in (lambda: s.signal("KILL"), s.stop):
            try:
                end()
            except Exception:  # noqa: BLE001 - already ended: squeue below tells
                pass
    end = time.monotonic() + deadline
    left = []
    for key, s in sets.items():
        # squeue beside the launcher's scancel (with the environment it sets, if any)
        command = s.delete_command[:-1] + ["squeue"] if s.delete_command[-1:] == ["scancel"] else ["squeue"]

        def listed():
            out = subprocess.run(command + ["-h", "-j", s.job_id, "-o", "%i"], capture_output=True, text=True,
                                 timeout=10)
            return out.returncode == 0 and s.job_id in out.stdout.split()

        while listed() and time.monotonic() < end:
            time.sleep(0.1)
        if listed():
            left.append(s.job_id)
        else:
            ipp_cluster.engines.pop(key, None)
            if os.path.basename(s.batch_file).startswith("slurm_engines-"):  # ours (``configure``)
                try:
                    os.remove(s.batch_file)
                except OSError:
                    pass
    return left
