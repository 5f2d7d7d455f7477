"""``wb.Cluster``: a local ipyparallel cluster by default, or a real one through a launcher
or an existing profile; engines that report what they are; TF state tracked per engine."""

import atexit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.common import roles, strategies
from workbench.common import validate
from workbench.datasets import Data
from workbench.errors import ClusterError, ClusterStartTimeout, ConfigError, invalid
from workbench.kernel import home, launchers, live, reaper, recorded, recovery, remote, zygote
from workbench.kernel.launch import launch as start_run
from workbench.kernel.pool import EnginePool
from workbench.kernel.processes import alive, family, reap, remove_engine_tmpdirs, sweep_engine_tmpdirs
from workbench.kernel.run import Run
from workbench.kernel import train as training
from workbench.store import ClusterRecord, Home


def _stop_all() -> None:
    """At interpreter exit: stop every cluster this process started, quietly. Runs still
    training end as stopped by the cluster (their run directories say so)."""
    clusters = live.clusters()
    for cluster in clusters:
        try:
            cluster.stop()
        except Exception:  # exit goes on: the reaper ends what is left
            pass
    for cluster in clusters:
        for run in cluster.runs:
            run.join(5)  # the watcher records the run's end before the interpreter tears down


def _stop_all_at_exit() -> None:
    """Register ``_stop_all`` (again) now that ipyparallel and pyzmq are imported: atexit
    runs handlers last-registered first, so it runs before pyzmq's garbage collector stops
    (after which freeing a zero-copy message prints ``RuntimeError: zmq gc socket requested
    during shutdown``, once per message) and while every socket still works."""
    import zmq.utils.garbage  # noqa: F401  (registers pyzmq's own handler first)

    atexit.unregister(_stop_all)
    atexit.register(_stop_all)


class Cluster:
    """A set of ipyparallel engines to train on.

    ``Cluster(engines=3)`` starts a controller and 3 engines on this machine, in the
    workbench's own IPython profile (``$WORKBENCH_HOME``, default ``~/.workbench``).

    ``Cluster(engines=8, launcher="slurm", controller="slurm", **options)`` passes the
    launcher names and any other keyword to ``ipyparallel.Cluster`` (MPI, SSH, Slurm, PBS,
    ... launchers). ``Cluster(launcher="ssh", hosts={"h1": 2, "h2": 2})`` starts 2 engines
    on each host over SSH, and the controller here, listening only on the address of this
    machine that the hosts reach (``controller_ip=`` chooses another); ``wb.testbed``
    makes such hosts on this machine. ``Cluster(profile="name")`` or ``Cluster(cluster_id=..., profile=...)``
    attaches to a cluster someone else started; ``stop()`` then only disconnects.

    Use as a context manager, or call ``start()`` and ``stop()``. Clusters this process
    started are stopped at interpreter exit. ``start()`` raises ``ClusterStartTimeout`` when
    the engines have not registered within ``timeout`` seconds, and ``ClusterError`` as soon
    as a local engine process (or ``mpiexec``) exits before registering; both with the last
    lines of the engines' and controller's logs.
    """

    def __init__(self, engines: int | None = None, *, profile: str | None = None, cluster_id: str | None = None,
                 launcher: str = "local", controller: str = "local", timeout: float = 120,
                 hosts: dict[str, int] | None = None, **ipp_options: Any) -> None:
        if hosts is not None:
            engines = remote.check_hosts(hosts, engines, launcher)
        self.attached = profile is not None and engines is None
        if not self.attached:
            engines = 3 if engines is None else engines
            validate.positive_int("engines", engines)
        if "n" in ipp_options:  # ipyparallel's own name for it
            raise invalid("n", ipp_options["n"], f"no 'n': Cluster() takes its number of engines as engines={ipp_options['n']!r}")
        if profile is not None and not isinstance(profile, str):
            raise invalid("profile", profile, "the name of an ipyparallel profile (a str)")
        if self.attached and not _profile_path(profile).is_dir():
            raise invalid("profile", profile, f"an existing ipyparallel profile (no folder {_profile_path(profile)})")
        if cluster_id is not None and profile is None:
            raise invalid("cluster_id", cluster_id, "a profile name beside it: Cluster(profile=..., cluster_id=...)")
        self.timeout = validate.positive_float("timeout", timeout)
        self.n = engines
        self.profile = profile
        self.cluster_id = cluster_id
        self.launcher = launcher
        self.controller = controller
        self.hosts = dict(hosts) if hosts is not None else None
        self.ipp_options = ipp_options
        self.client = None
        self._ipp = None
        # the engines and their TF state; their processes stay this object's (``_restart``)
        self.pool = EnginePool(self.timeout, is_local=self._is_local, restart=self._restart,
                               on_change=self._write_record, tag=lambda: self.cluster_tag,
                               controller_host=self._controller_host)
        self._pids = set()  # local pids this object started
        self._zygote = None  # the process local engines fork from (``workbench.engine.zygote``)
        self._remote_zygotes = []  # the ssh processes keeping a zygote on each SSH host
        self._pidfile = None  # the reaper's list of this cluster's PIDs
        self._record = None  # clusters/<id>.json, what the Workbench panel shows
        self._reaper = None
        self.runs: list[Run] = []

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> "Cluster":
        """Start (or attach to) the cluster and take the engines' inventory. Returns self."""
        if self.client is not None:
            return self
        import ipyparallel as ipp

        _stop_all_at_exit()
        sweep_engine_tmpdirs()  # those of killed engines, this kernel's or another's
        if self.attached:
            try:
                self.client = ipp.Client(profile=self.profile, cluster_id=self._find_cluster_id())
            except (OSError, ValueError) as e:
                raise ClusterError(f"Could not attach to ipyparallel profile {self.profile!r}: {e}") from e
        else:
            self._start_own(ipp)
        live.add(self)
        self.pool.connect(self.client)
        try:
            if self.attached:
                self.client.wait_for_engines(1, timeout=self.timeout, interactive=False)
            self.pool.take_inventory([e for e in self.client.ids if e not in self._find_busy()])
        except BaseException:
            self.stop()
            raise
        return self

    def _find_busy(self):
        """Engines of an attached cluster still running a task (a run whose kernel went
        away): asking them for an inventory would wait for the end of the run. They join
        ``engine_info`` when their run is re-attached (``wb.load``)."""
        if not self.attached:
            return set()
        return self.pool.find_busy(self.client.queue_status())

    def new_client(self) -> Any:
        """Another ipyparallel client of this (attached) cluster, for a thread of its own:
        clients are not thread-safe."""
        import ipyparallel as ipp

        return ipp.Client(profile=self.profile, cluster_id=self._find_cluster_id())

    def _find_cluster_id(self):
        """The given cluster id, or the only cluster running in the profile."""
        if self.cluster_id is not None:
            return self.cluster_id
        security = _profile_path(self.profile) / "security"
        ids = sorted(f.name[len("ipcontroller-"):-len("-client.json")]
                     for f in security.glob("ipcontroller-*-client.json"))
        if len(ids) > 1:
            raise invalid("cluster_id", None, f"one of the clusters running in profile {self.profile!r}: {ids}")
        return ids[0] if ids else ""

    def _start_own(self, ipp):
        import sys

        from traitlets.config import Config

        options = dict(self.ipp_options)
        if self.launcher == "local" and self.controller == "local":
            options.setdefault("controller_ip", "127.0.0.1")
        zygote_path = None  # where SSH hosts' engines fork from a zygote on their host (remote.py)
        if self.launcher == "ssh":
            import secrets

            wanted = zygote.remote_path(secrets.token_hex(4)) if zygote.enabled() else None
            if remote.configure_ssh(options, self.hosts, self.controller, self.timeout, wanted):
                zygote_path = wanted
        launchers.configure(options, self.launcher, self.timeout)  # MPI, Slurm
        if self.controller == "local":
            options.setdefault("controller_args", heartbeat_args(self.n, local=self.launcher == "local"))
        if self.launcher == "local":
            # engines import TensorFlow while they register (workbench.engine.start), or
            # fork from a zygote that imported it once (zygote.py); they start with the
            # controller, reading its connection file when it appears
            config = options.setdefault("config", Config())
            if "engine_cmd" not in config.LocalEngineSetLauncher:
                self._zygote = zygote.start()
                config.LocalEngineSetLauncher.engine_cmd = [
                    *(zygote.command(self._zygote) if self._zygote else [sys.executable, "-m", "workbench.engine.start"]),
                    f"--IPEngine.wait_for_url_file={self.timeout}",
                    "--IPEngine.enable_nanny=False"]  # a process less per engine: we watch PIDs
                if self._zygote is not None:
                    self._pids.add(self._zygote.pid)
                options.setdefault("send_engines_connection_env", False)
                options.setdefault("delay", 0)
        options.setdefault("log_level", 40)
        options.setdefault("shutdown_atexit", False)  # ours stops it first, without its stderr line
        try:
            self._ipp = ipp.Cluster(
                n=self.n, profile_dir=str(home.profile_dir()), engines=options.pop("engines", self.launcher),
                controller=self.controller, engine_timeout=int(self.timeout), **options,
            )
        except Exception as e:  # traitlets / entry point errors for unknown launchers
            if self._zygote is not None:  # nothing else started yet
                zygote.stop(self._zygote)
                self._pids.discard(self._zygote.pid)
                self._zygote = None
            raise ConfigError(f"ipyparallel refused the cluster options: {e}") from e
        try:
            if zygote_path is not None:  # their ssh processes are ours: stop() and the reaper end them
                self._remote_zygotes = remote.start_zygotes(options, zygote_path)
                self._pids.update(p.pid for p in self._remote_zygotes)
            self._ipp.start_cluster_sync()
            self.client = self._ipp.connect_client_sync()
            self._wait_for_engines()
        except BaseException as e:
            logs = self._log_tail()
            self._stop_own()
            if isinstance(e, TimeoutError):
                raise ClusterStartTimeout(
                    f"{self.n} engines did not register within {self.timeout:.0f} s. "
                    f"Last lines of the engines' and controller's logs:\n{logs}"
                ) from e
            raise ClusterError(f"The cluster failed to start: {e}\n{logs}") from e
        self._collect_pids()
        self._start_reaper()

    def _wait_for_engines(self):
        """Until ``n`` engines registered; an engine process that exits meanwhile fails the
        start at once (it waited for the whole timeout)."""
        import time

        deadline = time.monotonic() + self.timeout
        while True:
            exited = launchers.exited_engine_processes(self._ipp)
            if exited:
                raise ClusterError(f"{exited} engine process(es) exited before registering; their output is below.")
            left = deadline - time.monotonic()
            try:  # interactive=False: no progress widget of ipyparallel's own in the notebook
                self.client.wait_for_engines(self.n, timeout=max(0.0, min(0.5, left)), interactive=False)
                return
            except TimeoutError:
                if left <= 0.5:
                    raise

    def _start_reaper(self):
        """A watchdog that ends this cluster's processes if this kernel dies without
        stopping it (see ``workbench.kernel.reaper``)."""
        import os

        self._pidfile = Home().pidfile(self._ipp.cluster_id)
        self._write_pidfile()
        self._reaper = reaper.spawn("workbench.kernel.reaper", str(os.getpid()), str(self._pidfile))

    def _collect_pids(self):
        """Add the PIDs of the processes local launchers started (the controller, local
        engines) to ``_pids``. Remote launchers' PIDs (SSH: a PID on another host) never go
        in: those engines stop through their launcher."""
        if self._ipp is None:
            return
        self._pids.update(remote.local_pids(self._ipp.controller))
        for engine_set in self._ipp.engines.values():
            self._pids.update(remote.local_pids(engine_set))
        if self._zygote is not None:  # the engines it forked
            self._pids.update(family({self._zygote.pid}))

    def _is_local(self, info):
        """Did a local launcher of ours start this engine (so that it may be killed by PID)?"""
        if self._ipp is None:
            return False
        if info.pid not in self._pids and self._zygote is not None:
            self._collect_pids()  # an engine forked since the last look
        return info.pid in self._pids

    def _write_pidfile(self):
        if self._ipp is None or self._pidfile is None:
            return
        self._collect_pids()
        Home().write_pids(self._ipp.cluster_id, self._pids - {None})

    def stop(self) -> None:
        """Stop the controller and engines this object started (by PID, waiting until they
        are gone); an attached cluster is only disconnected."""
        live.discard(self)
        for run in self.runs:
            run.abandon()
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None
        self._stop_own()
        if self._record is not None:
            self._record.unlink(missing_ok=True)
            self._record = None
        self.pool.clear()

    def _stop_own(self):
        if self._ipp is None:
            return
        self._collect_pids()
        processes = family(self._pids)  # with engines' nannies, controller's schedulers
        # engines' private TMPDIRs (compiled functions, workers' scratch checkpoints): on
        # this machine's filesystem for local engines and for hosts that share it
        tmps, tag = {info.tmp for info in self.pool.info.values()}, self.cluster_tag
        controller = remote.local_pids(self._ipp.controller)
        launchers.end_mpi_jobs(self._ipp)  # mpiexec takes its ranks on every host down
        launchers.end_slurm_jobs(self._ipp)  # scancel, until squeue no longer lists the job
        # engines whose TF runtime holds collectives or servers take ~10 s to exit when asked;
        # their runs are over and saved, so end them (ours, by PID) before the controller
        reap(processes - family(controller), deadline=0)
        remote.kill_remote_engines(self._ipp)  # the same for engines on other hosts, through their launcher
        try:
            self._ipp.stop_cluster_sync()
        except Exception:
            self._ipp.shutdown_atexit = False  # no second try from its __del__, at a random time
        self._ipp = None
        reap(processes, deadline=10)
        self._pids.clear()
        if self._zygote is not None:
            zygote.stop(self._zygote)
            self._zygote = None
        zygote.end_remote(self._remote_zygotes)  # killed above: their zygotes end with their ssh sessions
        self._remote_zygotes = []
        remove_engine_tmpdirs(tag, tmps)
        if self._pidfile is not None:
            self._pidfile.unlink(missing_ok=True)  # the reaper exits when its list is gone
            self._pidfile = None
        if self._reaper is not None:
            try:
                self._reaper.wait(5)
            except Exception:
                self._reaper.kill()
                self._reaper.wait(5)
            self._reaper = None

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def started_by_zygote(self) -> bool:
        """Do this cluster's local engines fork from a zygote that imported TensorFlow once
        (``workbench.engine.zygote``; automatic on Linux without GPUs, off with
        ``WORKBENCH_ZYGOTE=0``)? False if the zygote refused to fork or is gone."""
        return self._zygote is not None and self._zygote.process.poll() is None

    @property
    def running(self) -> bool:
        return self.client is not None

    # -- inventory -------------------------------------------------------------------
    def _controller_host(self):
        """The controller's address as engines dial it: engines find their own address
        from their connection to it (``inventory.report``). Never the controller's host
        name resolved here: ``/etc/hosts`` maps this machine's name to 127.0.0.1."""
        if self._ipp is not None and self.launcher == "local" and self.controller == "local":
            return "127.0.0.1"
        return remote.controller_address(getattr(self.client, "_config", {}) or {})

    def _write_record(self):
        """``clusters/<id>.json`` under the workbench home: this cluster's engines and
        their TF state (role of their latest run), for the Workbench panel
        (``workbench.store``); removed on stop."""
        import os

        engines = [{"id": e["engine"], "host": e["host"], "pid": e["pid"], "role": e["tf_state"],
                    "device": f"GPU {cvd}" if (cvd := e["cuda_visible_devices"]) else "CPU"}
                   for e in self.pool.describe()]
        record: ClusterRecord = {
            "id": self.cluster_tag, "kernel_pid": os.getpid(), "notebook": os.environ.get("JPY_SESSION_NAME"),
            "controller_pid": getattr(self._ipp.controller, "pid", None) if self._ipp is not None else None,
            "profile": self.profile, "engines": engines}
        try:
            self._record = Home().write_cluster(record)
        except OSError:
            pass

    def _log_tail(self, lines=20):
        if self._ipp is None:
            return ""
        out = []
        sources = [(f"engines {k}", v) for k, v in self._ipp.engines.items()]
        sources.append(("controller", self._ipp.controller))
        for name, launcher in sources:
            try:
                text = launcher.get_output() if launcher is not None else ""
            except Exception as e:  # output retrieval is best effort
                text = f"(could not read output: {e})"
            tail = "\n".join(text.strip().splitlines()[-lines:])
            out.append(f"--- {name} ---\n{tail or '(no output)'}")
        return "\n".join(out)

    def engine_output(self, engine_id: int, lines: int = 12) -> str:
        """The end of the log of an engine this kernel started on this machine (ipyparallel's
        lines and what the process printed: ``recovery.log_tail``); "" when unknown."""
        if self._ipp is None:
            return ""
        mark = f"Completed registration with id {engine_id}\n"
        for engine_set in self._ipp.engines.values():
            for launcher in list(getattr(engine_set, "launchers", {}).values()):
                path = getattr(launcher, "output_file", None)
                try:
                    text = Path(path).read_text(errors="replace") if path else ""
                except OSError:
                    continue
                if mark in text:
                    return recovery.log_tail(text, lines)
        return ""

    @property
    def cluster_tag(self) -> str:
        if self._ipp is not None:
            return self._ipp.cluster_id
        return self.cluster_id or (self.profile or "attached")

    @property
    def engine_info(self) -> dict[int, roles.EngineInfo]:
        """``{engine id: EngineInfo}`` of the engines in use."""
        return self.pool.info

    @property
    def engines(self) -> Any:
        """One row per engine: id, host, address, pid, port, gpus, visible GPU, TF state."""
        import pandas as pd

        rows = [dict(e, gpus=",".join(map(str, e["gpus"])) or "-",
                     cuda_visible_devices=e["cuda_visible_devices"] or "-")
                for e in self.pool.describe()]
        return pd.DataFrame(rows).set_index("engine") if rows else pd.DataFrame()

    def __repr__(self) -> str:
        head = f"<workbench.Cluster {self._kind()} {'running' if self.running else 'stopped'}, {len(self.pool)} engines>"
        return head if not len(self.pool) else f"{head}\n{self.engines.to_string()}"

    def _repr_html_(self) -> str:
        head = f"<b>workbench.Cluster</b> {self._kind()}, {'running' if self.running else 'stopped'}, {len(self.pool)} engines"
        return head if not len(self.pool) else head + self.engines.to_html()

    def _kind(self):
        if self.attached:
            return f"attached to profile {self.profile!r}"
        return "local" if self.launcher == "local" else f"launcher={self.launcher!r}"

    # -- engines ----------------------------------------------------------------------
    def _require_running(self):
        if self.client is None:
            raise ClusterError("The cluster is not running: call cluster.start() (or use `with wb.Cluster(...)`) first.")

    def prepare(self, tasks: list[roles.Task]) -> list[roles.Task]:
        """``tasks`` with every engine able to take its TF state (see ``EnginePool.prepare``)."""
        return self.pool.prepare(tasks)

    def mark(self, tasks: list[roles.Task]) -> None:
        """These tasks run now: their engines hold the TF state they leave."""
        self.pool.mark(tasks)

    def recycle(self, engine_ids: list[int]) -> dict[int, int]:
        """Replace engines ``engine_ids`` with fresh ones on the same ports. Returns {old: new}.

        Local engines are killed by PID (they may be blocked inside a TF collective, deaf
        to ipyparallel's shutdown request); remote ones are asked to shut down.
        """
        self._require_running()
        return self.pool.recycle(engine_ids)

    def _restart(self, old):
        """End engines ``old`` (EngineInfo) and start as many new ones: what the pool's
        recycling asks of the processes this object's launchers started."""
        self._require_running()
        if self._ipp is None:
            raise ClusterError(
                f"Engines {sorted(o.id for o in old)} hold TensorFlow state that the next run cannot reuse, and this "
                "cluster was attached, not started, by the workbench, so it cannot restart them. "
                "Restart those engines (or the cluster) and try again."
            )
        if launchers.is_mpi(self._ipp):  # one mpiexec job: restarted whole, never rank by rank
            return self._restart_mpi()
        local = [o for o in old if self._is_local(o)]
        where = remote.ssh_hosts_of(self._ipp, [o.pid for o in old if not self._is_local(o)])
        others = [o.id for o in old if not self._is_local(o) and o.id in self.client.ids and o.pid not in where]
        if others:
            self.client.shutdown(targets=others, block=False)
        reap(family({o.pid for o in local}), deadline=0)  # SIGKILL: engines we started
        remote.kill_remote_engines(self._ipp, pids=set(where))  # through their launcher
        per_host = {}
        for pid, host in where.items():  # an SSH engine's replacement starts on its host
            per_host[host] = per_host.get(host, 0) + 1
        try:
            if per_host and len(where) == len(old):
                self._ipp.start_engines_sync(n=len(old), engines=per_host)
            elif launchers.is_slurm(self._ipp):  # each on its predecessor's node
                launchers.start_slurm_engines(self._ipp, [o.host for o in old])
            else:
                self._ipp.start_engines_sync(n=len(old))
        except Exception as e:
            where_to = f" on {', '.join(sorted(per_host))}" if per_host else ""
            raise ClusterError(f"Could not start {len(old)} replacement engines{where_to} for engines "
                               f"{sorted(o.id for o in old)}: {e}") from e
        self._write_pidfile()
        return None

    def _restart_mpi(self):
        """Every engine of the cluster restarted, as the ranks of a new ``mpiexec`` job (same
        engine ids: ipyparallel's --mpi makes the rank the id). Returns the old engines."""
        old = list(self.pool.info.values())
        launchers.refuse_under_run(self.runs, [o.id for o in old])
        launchers.restart_mpi(self._ipp, self.client, [o.id for o in old], self.n, self.timeout)
        self._pids.clear()  # the old job's; the controller's and the new job's are collected
        self._write_pidfile()
        return old

    # -- runs --------------------------------------------------------------------------
    def train(self, model: Callable[[], Any], data: Data | tuple | Callable[[Any], Any], *,
              loss: str | Callable[..., Any] = "sparse_categorical_crossentropy", optimizer: str | Any = "sgd",
              learning_rate: float | Any | None = None, momentum: float = 0.0,
              strategy: str = "multi_worker_mirrored", workers: int = 2, ps: int = 0,
              global_batch_size: int = 256, steps: int = 300, seed: int = 0, steps_per_execution: int | None = None,
              checkpoint_every: int = 100, eval_every: int = 0,
              variable_partitioner: int | tuple[str, int] | None = None, devices: int = 0,
              average_every: int | None = None, metrics: Sequence[str | Any] | None = None,
              eval_data: Data | tuple | Callable[[Any], Any] | None = None, stall_timeout: float = 60.0,
              start_timeout: float = 180.0, dashboard: bool | None = None, compression: str | None = None,
              anatomy: bool = True) -> Run:
        """Start a training run on the engines and return its ``Run`` at once.

        ``strategy``: "multi_worker_mirrored" (sync all-reduce over ``workers`` engines),
        "parameter_server" (async; 1 chief + ``ps`` + ``workers`` engines), "mirrored"
        (one engine, all its devices; ``devices=N`` splits the CPU into N logical ones),
        "parameter_averaging" (sync; ``workers`` engines train their own replicas and
        average them every ``average_every`` steps) or "single" (one engine, one device). Every argument is checked here, before any
        engine is touched. ``dashboard``: show the live dashboard (default: when running
        in a notebook kernel).

        What ``model.compile`` takes, trained as a correct ``tf.distribute`` custom loop:

        - ``loss``: a name, a ``keras.losses.Loss`` object with any reduction, or a callable
          returning per-example losses. The workbench always averages the per-example losses
          over the global batch, and adds the model's own losses (regularizers, ``add_loss``)
          with ``tf.nn.scale_regularization_loss``: n replicas train as one process would.
        - ``optimizer``: "sgd", "adam", "rmsprop", "adagrad" (with ``learning_rate``, default
          0.1: a number, ``wb.linear_scaling(...)`` or any Keras ``LearningRateSchedule``, and
          ``momentum`` for SGD), a Keras optimizer object (rebuilt on every engine from its
          config, with its clipping, weight decay and schedule), or a callable returning one.
          Under synchronous strategies clipping applies to the gradient summed over all
          replicas (the global batch's), as in one process; Keras 3 alone would clip each
          replica's part.
        - ``metrics``: Keras metric names or objects, computed per worker on each step's batch
          (columns of ``run.history``) and over the evaluation data (``run.evaluations``).
        - ``eval_data``: what evaluation reads (numpy ``(x, y)``, a ``Data`` or a finite
          ``dataset_fn``); by default the test split of numpy ``data``.

        ``compression``: None (32 bits), "fp16", "bf16" or "int8": the precision of the
        all-reduce of "multi_worker_mirrored" (gradients) and "parameter_averaging" (each
        replica's change since the last average); int8 scales each tensor and feeds the
        rounding error back into the next step. ``anatomy``: time the pieces of every step
        (``run.anatomy()``). The bytes each step hands to the all-reduce (``comm_bytes`` in
        ``run.history``, and the dashboard's all-reduce line) are counted either way.
        """
        self._require_running()
        self._require_idle()
        self._take_late_inventory()
        job = training.make_job(
            len(self.pool), model=model, data=data, loss=loss, optimizer=optimizer, learning_rate=learning_rate,
            momentum=momentum, strategy=strategy, workers=workers, ps=ps,
            global_batch_size=global_batch_size, steps=steps, seed=seed,
            steps_per_execution=steps_per_execution, checkpoint_every=checkpoint_every,
            eval_every=eval_every, variable_partitioner=variable_partitioner, devices=devices,
            average_every=average_every, metrics=metrics, eval_data=eval_data,
            compression=compression, anatomy=anatomy,
        )
        stall_timeout = validate.positive_float("stall_timeout", stall_timeout)
        start_timeout = validate.positive_float("start_timeout", start_timeout)
        run = self.launch(job, stall_timeout=stall_timeout, start_timeout=start_timeout)
        if dashboard or (dashboard is None and _in_notebook()):
            run.dashboard().show()
        return run

    def resume(self, run: Any, steps: int | None = None, *, workers: int | None = None, ps: int | None = None,
               stall_timeout: float = 60.0, start_timeout: float = 180.0) -> Run:
        """Continue a recorded run (``run``: its id, a unique prefix of it, or a ``Run``) on
        this cluster from its last checkpoint, in its run directory, up to ``steps`` total
        steps (default: its target), whichever kernel started it. Its history goes on from
        the checkpoint: steps done after it by an interrupted attempt are done again, once.

        ``workers`` (multi_worker_mirrored, parameter_server) and ``ps`` (parameter_server,
        unsharded variables) may differ from the run's; everything else is the run's own."""
        self._require_running()
        self._take_late_inventory()
        return recorded.resume(self, run, steps=steps, workers=workers, ps=ps, stall_timeout=stall_timeout,
                               start_timeout=start_timeout)

    def _take_late_inventory(self):
        """An attached cluster's engines that registered after ``start()`` join the pool
        before a run is planned (its owner may add engines at any time)."""
        if self.attached:
            self.pool.take_late_inventory()

    def _require_idle(self):
        busy = [r for r in self.runs if not r.done]
        if busy:
            raise ClusterError(f"Run {busy[0].id} is still running on this cluster: "
                               "call its wait() or stop() before starting another.")

    def launch(self, job: Any, *, resume: bool = False, steps: int | None = None, stall_timeout: float = 60.0,
               start_timeout: float = 180.0) -> Run:
        """Start ``job`` (a checked ``Job``, as ``train`` and ``resume`` make them) on this
        cluster's engines, after replacing engines that died or hold unusable TF state;
        ``resume``: continue from its run directory's last checkpoint, up to ``steps``."""
        self._require_running()
        self._require_idle()
        self.pool.heal()
        run = start_run(self, job, resume=resume, steps=steps, stall_timeout=stall_timeout, start_timeout=start_timeout)
        self.runs.append(run)
        if strategies.spec(job.strategy).has_ps:  # a lost worker is replaced mid-run (kernel/recovery.py)
            self.keep_standby()
        return run

    def keep_standby(self) -> None:
        """Keep one spare engine on a local cluster, started ahead of need and left out of
        ``engines``: recycling takes registered spares first (``EnginePool.recycle``), so a
        lost parameter-server worker's replacement starts on an engine that has imported
        TensorFlow already instead of waiting for a new process to start and import it
        (seconds on an idle machine, tens of seconds on a loaded one: issue 19). The
        engine each recycling starts becomes the next spare. Costs one idle engine process
        (TF imported: ~0.4 GB). Other launchers and attached clusters keep none, nor do
        clusters whose engines fork from a zygote (``kernel/zygote.py``): a replacement
        forked there has TensorFlow imported too, and starts as soon as a spare would."""
        if self._ipp is None or self.launcher != "local" or launchers.is_mpi(self._ipp) or self._zygote is not None:
            return
        taken = {e.pid for e in self.pool.info.values()}
        started = set().union(*(remote.local_pids(s) for s in self._ipp.engines.values()))
        if any(alive(p) for p in started - taken):
            return  # a spare is up, or starting
        self._ipp.start_engines_sync(n=1)
        self._write_pidfile()


def _in_notebook():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


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


def _profile_path(profile):
    from IPython.paths import get_ipython_dir

    return Path(get_ipython_dir()) / f"profile_{profile}"
