"""``Launched``: the processes a ``wb.Cluster`` started itself, and how they start, stop and
are replaced.

A cluster the workbench starts (not one it attaches to) owns an ipyparallel controller and
engines, started through ipyparallel's launchers: local processes by default (forked from a
zygote that imported TensorFlow once, ``launchers/zygote.py``), or MPI, Slurm (``batch.py``)
and SSH (``ssh.py``) engines. This object starts them, knows which of their PIDs are local
(only those are ever killed by PID; remote engines stop through their launcher), keeps the
reaper's PID file current, starts replacements for engines the pool recycles, keeps a spare
engine where that helps, and stops everything, waiting until every process is gone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workbench.errors import ClusterError, ClusterStartTimeout, ConfigError
from workbench.kernel.engines.health import log_tail
from workbench.kernel.engines.processes import alive, descendants, family, own, reap, remove_engine_tmpdirs
from workbench.kernel.launchers import batch, home, reaper, ssh, zygote
from workbench.store import Home


class Launched:
    """The processes of one cluster started by the workbench: ``n`` engines through
    ``launcher`` ("local", "mpi", "slurm", "ssh" or another of ipyparallel's), a
    ``controller``, on ``hosts`` for SSH; ``options``: ``ipyparallel.Cluster``'s keywords."""

    def __init__(self, n: int, launcher: str, controller: str, hosts: dict[str, int] | None,
                 options: dict[str, Any], timeout: float) -> None:
        self.n = n
        self.launcher = launcher
        self.controller = controller
        self.hosts = hosts
        self.options = options
        self.timeout = timeout
        self.ipp: Any = None  # the ipyparallel.Cluster, once started
        self.pids: set[int] = set()  # local pids this object started
        self.zygote: Any = None  # the process local engines fork from (``workbench.engine.startup.zygote``)
        self.remote_zygotes: list = []  # the ssh processes keeping a zygote on each SSH host
        self.pidfile: Path | None = None  # the reaper's list of this cluster's PIDs
        self.reaper_process: Any = None  # the watchdog that ends these processes if this kernel dies

    @property
    def cluster_id(self) -> str | None:
        return self.ipp.cluster_id if self.ipp is not None else None

    @property
    def controller_pid(self) -> int | None:
        return getattr(self.ipp.controller, "pid", None) if self.ipp is not None else None

    @property
    def started_by_zygote(self) -> bool:
        """Do local engines fork from a zygote that is still there?"""
        return self.zygote is not None and self.zygote.process.poll() is None

    # -- start --------------------------------------------------------------------------
    def start(self, ipp: Any, heartbeat: list[str]) -> Any:
        """Start the controller and the engines; returns a connected ipyparallel client once
        ``n`` engines registered. ``heartbeat``: the controller's heartbeat arguments.
        Raises ``ClusterStartTimeout`` or ``ClusterError`` with the logs' last lines, having
        stopped what it started."""
        from traitlets.config import Config

        options = dict(self.options)
        if self.launcher == "local" and self.controller == "local":
            options.setdefault("controller_ip", "127.0.0.1")
        zygote_path = None  # where SSH hosts' engines fork from a zygote on their host (launchers/ssh.py)
        if self.launcher == "ssh":
            import secrets

            wanted = zygote.remote_path(secrets.token_hex(4)) if zygote.enabled() else None
            if ssh.configure_ssh(options, self.hosts, self.controller, self.timeout, wanted):
                zygote_path = wanted
        batch.configure(options, self.launcher, self.timeout)  # MPI, Slurm
        if self.controller == "local":
            options.setdefault("controller_args", heartbeat)
        if self.launcher == "local":
            # engines import TensorFlow while they register (workbench.engine.startup.start), or
            # fork from a zygote that imported it once (zygote.py); they start with the
            # controller, reading its connection file when it appears
            config = options.setdefault("config", Config())
            if "engine_cmd" not in config.LocalEngineSetLauncher:
                self.zygote = zygote.start()
                config.LocalEngineSetLauncher.engine_cmd = [
                    *(zygote.command(self.zygote) if self.zygote else [sys.executable, "-m", "workbench.engine.startup.start"]),
                    f"--IPEngine.wait_for_url_file={self.timeout}",
                    "--IPEngine.enable_nanny=False"]  # a process less per engine: we watch PIDs
                if self.zygote is not None:
                    self.pids.add(self.zygote.pid)
                options.setdefault("send_engines_connection_env", False)
                options.setdefault("delay", 0)
        options.setdefault("log_level", 40)
        options.setdefault("shutdown_atexit", False)  # ours stops it first, without its stderr line
        try:
            self.ipp = ipp.Cluster(
                n=self.n, profile_dir=str(home.profile_dir()), engines=options.pop("engines", self.launcher),
                controller=self.controller, engine_timeout=int(self.timeout), **options,
            )
        except Exception as e:  # traitlets / entry point errors for unknown launchers
            if self.zygote is not None:  # nothing else started yet
                zygote.stop(self.zygote)
                self.pids.discard(self.zygote.pid)
                self.zygote = None
            raise ConfigError(f"ipyparallel refused the cluster options: {e}") from e
        try:
            if zygote_path is not None:  # their ssh processes are ours: stop() and the reaper end them
                self.remote_zygotes = ssh.start_zygotes(options, zygote_path)
                self.pids.update(p.pid for p in self.remote_zygotes)
            self.ipp.start_cluster_sync()
            client = self.ipp.connect_client_sync()
            self._wait_for_engines(client)
        except BaseException as e:
            logs = self.log_tail()
            self.stop()
            if not isinstance(e, Exception):  # a KeyboardInterrupt (Ctrl-C): as it came, what started ended
                raise
            if isinstance(e, TimeoutError):
                raise ClusterStartTimeout(
                    f"{self.n} engines did not register within {self.timeout:.0f} s. "
                    f"Last lines of the engines' and controller's logs:\n{logs}"
                ) from e
            raise ClusterError(f"The cluster failed to start: {e}\n{logs}") from e
        self.collect_pids()
        self.pidfile = Home().pidfile(self.ipp.cluster_id)
        self.write_pidfile()
        # a watchdog that ends these processes if this kernel dies without stopping them
        self.reaper_process = reaper.spawn("workbench.kernel.launchers.reaper", str(os.getpid()), str(self.pidfile))
        return client

    def _wait_for_engines(self, client):
        """Until ``n`` engines registered; an engine process that exits meanwhile fails the
        start at once (it waited for the whole timeout)."""
        import time

        deadline = time.monotonic() + self.timeout
        while True:
            exited = batch.exited_engine_processes(self.ipp)
            if exited:
                raise ClusterError(f"{exited} engine process(es) exited before registering; their output is below.")
            left = deadline - time.monotonic()
            try:  # interactive=False: no progress widget of ipyparallel's own in the notebook
                client.wait_for_engines(self.n, timeout=max(0.0, min(0.5, left)), interactive=False)
                return
            except TimeoutError:
                if left <= 0.5:
                    raise

    # -- which processes are ours -----------------------------------------------------------
    def collect_pids(self) -> None:
        """Add the PIDs of the processes local launchers started (the controller, local
        engines) to ``pids``. Remote launchers' PIDs (SSH: a PID on another host) never go
        in: those engines stop through their launcher."""
        if self.ipp is None:
            return
        self.pids.update(ssh.local_pids(self.ipp.controller))
        for engine_set in self.ipp.engines.values():
            self.pids.update(ssh.local_pids(engine_set))
        if self.zygote is not None:  # the engines it forked
            self.pids.update(family({self.zygote.pid}))
        self.pids &= descendants()  # an ended engine's PID can name another's process by now

    def is_local(self, pid: int) -> bool:
        """Did a local launcher of ours start process ``pid`` (may it be killed by PID)?"""
        if self.ipp is None:
            return False
        if pid not in self.pids and self.zygote is not None:
            self.collect_pids()  # an engine forked since the last look
        return pid in self.pids

    def write_pidfile(self) -> None:
        if self.ipp is None or self.pidfile is None:
            return
        self.collect_pids()
        Home().write_pids(self.ipp.cluster_id, self.pids - {None})

    # -- replacing engines ------------------------------------------------------------------
    def restart(self, old: list, client: Any, runs: Iterable[Any], engines: list) -> list | None:
        """End engines ``old`` (EngineInfo) and start as many new ones: what the pool's
        recycling asks. ``engines``: every engine's EngineInfo (an MPI job restarts whole:
        then returns them, the old engines; else None)."""
        if batch.is_mpi(self.ipp):  # one mpiexec job: restarted whole, never rank by rank
            batch.refuse_under_run(runs, [o.id for o in engines])
            batch.restart_mpi(self.ipp, client, [o.id for o in engines], self.n, self.timeout)
            self.pids.clear()  # the old job's; the controller's and the new job's are collected
            self.write_pidfile()
            return list(engines)
        local = [o for o in old if self.is_local(o.pid)]
        where = ssh.ssh_hosts_of(self.ipp, [o.pid for o in old if not self.is_local(o.pid)])
        others = [o.id for o in old if not self.is_local(o.pid) and o.id in client.ids and o.pid not in where]
        if others:
            client.shutdown(targets=others, block=False)
        reap(own({o.pid for o in local}), deadline=0)  # SIGKILL: engines we started
        ssh.kill_remote_engines(self.ipp, pids=set(where))  # through their launcher
        per_host = {}
        for pid, host in where.items():  # an SSH engine's replacement starts on its host
            per_host[host] = per_host.get(host, 0) + 1
        try:
            if per_host and len(where) == len(old):
                self.ipp.start_engines_sync(n=len(old), engines=per_host)
            elif batch.is_slurm(self.ipp):  # each on its predecessor's node
                batch.start_slurm_engines(self.ipp, [o.host for o in old])
            else:
                self.ipp.start_engines_sync(n=len(old))
        except Exception as e:
            where_to = f" on {', '.join(sorted(per_host))}" if per_host else ""
            raise ClusterError(f"Could not start {len(old)} replacement engines{where_to} for engines "
                               f"{sorted(o.id for o in old)}: {e}") from e
        self.write_pidfile()
        return None

    def keep_standby(self, taken: set[int]) -> None:
        """Keep one spare engine on a local cluster, started ahead of need and left out of
        the pool (``taken``: the pool's engines' PIDs): recycling takes registered spares
        first (``EnginePool.recycle``), so a lost parameter-server worker's replacement
        starts on an engine that has imported TensorFlow already instead of waiting for a
        new process to start and import it (seconds on an idle machine, tens of seconds on
        a loaded one: issue 19). The engine each recycling starts becomes the next spare.
        Costs one idle engine process (TF imported: ~0.4 GB). Other launchers keep none,
        nor do clusters whose engines fork from a zygote (``launchers/zygote.py``): a
        replacement forked there has TensorFlow imported too, and starts as soon as a spare
        would."""
        if self.ipp is None or self.launcher != "local" or batch.is_mpi(self.ipp) or self.zygote is not None:
            return
        started = set().union(*(ssh.local_pids(s) for s in self.ipp.engines.values()))
        if any(alive(p) for p in started - taken):
            return  # a spare is up, or starting
        self.ipp.start_engines_sync(n=1)
        self.write_pidfile()

    # -- logs -------------------------------------------------------------------------------
    def log_tail(self, lines: int = 20) -> str:
        """The last lines of every engine set's and the controller's output."""
        if self.ipp is None:
            return ""
        out = []
        sources = [(f"engines {k}", v) for k, v in self.ipp.engines.items()]
        sources.append(("controller", self.ipp.controller))
        for name, launcher in sources:
            try:
                text = launcher.get_output() if launcher is not None else ""
            except Exception as e:  # output retrieval is best effort
                text = f"(could not read output: {e})"
            tail = "\n".join(text.strip().splitlines()[-lines:])
            out.append(f"--- {name} ---\n{tail or '(no output)'}")
        return "\n".join(out)

    def engine_output(self, engine_id: int, lines: int = 12) -> str:
        """The end of the log of an engine started on this machine (ipyparallel's lines and
        what the process printed: ``health.log_tail``); "" when unknown."""
        if self.ipp is None:
            return ""
        mark = f"Completed registration with id {engine_id}\n"
        for engine_set in self.ipp.engines.values():
            for launcher in list(getattr(engine_set, "launchers", {}).values()):
                path = getattr(launcher, "output_file", None)
                try:
                    text = Path(path).read_text(errors="replace") if path else ""
                except OSError:
                    continue
                if mark in text:
                    return log_tail(text, lines)
        return ""

    # -- stop -------------------------------------------------------------------------------
    def stop(self, tmps: Iterable[str] = ()) -> None:
        """Stop every process this object started (by PID, waiting until they are gone),
        then remove the engines' private TMPDIRs (``tmps``: the engines' temp directories
        as they reported them)."""
        if self.ipp is None:
            return
        tag = self.ipp.cluster_id
        self.collect_pids()
        processes = own(self.pids)  # with engines' nannies, controller's schedulers
        controller = own(ssh.local_pids(self.ipp.controller))
        batch.end_mpi_jobs(self.ipp)  # mpiexec takes its ranks on every host down
        batch.end_slurm_jobs(self.ipp)  # scancel, until squeue no longer lists the job
        # engines whose TF runtime holds collectives or servers take ~10 s to exit when asked;
        # their runs are over and saved, so end them (ours, by PID) before the controller
        reap(processes - controller, deadline=0)
        ssh.kill_remote_engines(self.ipp)  # the same for engines on other hosts, through their launcher
        try:
            self.ipp.stop_cluster_sync()
        except Exception:
            self.ipp.shutdown_atexit = False  # no second try from its __del__, at a random time
        self.ipp = None
        reap(processes, deadline=10)
        self.pids.clear()
        if self.zygote is not None:
            zygote.stop(self.zygote)
            self.zygote = None
        zygote.end_remote(self.remote_zygotes)  # killed above: their zygotes end with their ssh sessions
        self.remote_zygotes = []
        remove_engine_tmpdirs(tag, tmps)
        if self.pidfile is not None:
            self.pidfile.unlink(missing_ok=True)  # the reaper exits when its list is gone
            self.pidfile = None
        if self.reaper_process is not None:
            try:
                self.reaper_process.wait(5)
            except Exception:
                self.reaper_process.kill()
                self.reaper_process.wait(5)
            self.reaper_process = None


def heartbeat_args(engines: int, local: bool) -> list[str]:
    """The controller's heartbeat: a dead engine is unregistered after ~4 s (ipyparallel's
    default: 30 s). An engine's registration completes on the controller's second beat after
    it connects, so up to 16 local engines beat every 100 ms: Cluster(engines=4) was ready
    1.2 s sooner than at 1 s (4.9 -> 3.6-3.7 s), for 0.011 (4 engines) to 0.018 (16) of a
    core more in the controller and 0.003 per idle engine. Engines on other hosts (SSH, MPI,
    Slurm) and larger clusters keep 1 s: ipyparallel counts a beat missed when its answer
    takes longer than two periods, and a link to another host may well take 200 ms."""
    period = 100 if local and engines <= 16 else 1000
    return [f"--HeartMonitor.period={period}", f"--HeartMonitor.max_heartmonitor_misses={4000 // period - 1}"]
