"""``wb.Cluster``: a local ipyparallel cluster by default, or a real one through a launcher
or an existing profile; engines that report what they are; TF state tracked per engine."""

import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.common import roles, strategies
from workbench.common import validate
from workbench.datasets import Data
from workbench.errors import ClusterError, invalid
from workbench.kernel.engines import live
from workbench.kernel.engines.pool import EnginePool
from workbench.kernel.engines.processes import sweep_engine_tmpdirs
from workbench.kernel.launchers import borrowed, launched, ssh
from workbench.kernel.runs import job as training
from workbench.kernel.runs import recorded
from workbench.kernel.runs.handle import Run
from workbench.kernel.runs.launch import launch as start_run
from workbench.store import ClusterRecord, Home


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
        if hosts is not None or launcher == "ssh":
            engines = ssh.check_hosts(hosts, engines, launcher, ipp_options.get("config"))
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
        # the processes this object starts (None when attached): controller, engines, zygote;
        # or, in a notebook that a test session runs, engines of the session's shared cluster
        self.launched = None if self.attached else borrowed.processes(
            borrowed.offered(), engines, launcher, controller, self.hosts, ipp_options, self.timeout)
        # the engines and their TF state; their processes stay this object's (``_restart``)
        self.pool = EnginePool(self.timeout, is_local=self._is_local, restart=self._restart,
                               on_change=self._write_record, tag=lambda: self.cluster_tag,
                               controller_host=self._controller_host)
        self._record = None  # clusters/<id>.json, what the Workbench panel shows
        self.runs: list[Run] = []

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> "Cluster":
        """Start (or attach to) the cluster and take the engines' inventory. Returns self."""
        if self.client is not None:
            return self
        import ipyparallel as ipp

        live.stop_all_at_exit()
        sweep_engine_tmpdirs()  # those of killed engines, this kernel's or another's
        if self.attached:
            try:
                self.client = ipp.Client(profile=self.profile, cluster_id=self._find_cluster_id())
            except (OSError, ValueError) as e:
                raise ClusterError(f"Could not attach to ipyparallel profile {self.profile!r}: {e}") from e
        else:
            heartbeat = launched.heartbeat_args(self.n, local=self.launcher == "local")
            try:
                self.client = self.launched.start(ipp, heartbeat)
            except borrowed.Refused:  # lent to another cluster of this kernel: this one starts its own
                self.launched = borrowed.processes(None, self.n, self.launcher, self.controller, self.hosts,
                                                   self.ipp_options, self.timeout)
                self.client = self.launched.start(ipp, heartbeat)
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
        """Engines of the controller this cluster does not take: an attached cluster's still
        running a task (a run whose kernel went away: asking them for an inventory would wait
        for the end of the run; they join ``engine_info`` when their run is re-attached,
        ``wb.load``), or the engines of a test session's shared cluster not lent to this one."""
        if isinstance(self.launched, borrowed.Borrowed):
            aside = self.launched.not_lent(self.client.ids)
            self.pool.set_aside(aside)
            return set(aside)
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

    def _is_local(self, info):
        """Did a local launcher of ours start this engine (so that it may be killed by PID)?"""
        return self.launched is not None and self.launched.is_local(info.pid)

    def _restart(self, old):
        """End engines ``old`` (EngineInfo) and start as many new ones: what the pool's
        recycling asks of the processes this object's launchers started."""
        self._require_running()
        if self.launched is None or self.launched.cluster_id is None:
            raise ClusterError(
                f"Engines {sorted(o.id for o in old)} hold TensorFlow state that the next run cannot reuse, and this "
                "cluster was attached, not started, by the workbench, so it cannot restart them. "
                "Restart those engines (or the cluster) and try again."
            )
        return self.launched.restart(old, self.client, self.runs, list(self.pool.info.values()))

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
        if self.launched is not None:
            self.launched.stop({info.tmp for info in self.pool.info.values()})
        if self._record is not None:
            self._record.unlink(missing_ok=True)
            self._record = None
        self.pool.clear()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def started_by_zygote(self) -> bool:
        """Do this cluster's local engines fork from a zygote that imported TensorFlow once
        (``workbench.engine.startup.zygote``; automatic on Linux without GPUs, off with
        ``WORKBENCH_ZYGOTE=0``)? False if the zygote refused to fork or is gone."""
        return self.launched is not None and self.launched.started_by_zygote

    def engine_output(self, engine_id: int, lines: int = 12) -> str:
        """The end of the log of an engine this kernel started on this machine (ipyparallel's
        lines and what the process printed); "" when unknown."""
        return self.launched.engine_output(engine_id, lines) if self.launched is not None else ""

    @property
    def running(self) -> bool:
        return self.client is not None

    # -- inventory -------------------------------------------------------------------
    def _controller_host(self):
        """The controller's address as engines dial it: engines find their own address
        from their connection to it (``inventory.report``). Never the controller's host
        name resolved here: ``/etc/hosts`` maps this machine's name to 127.0.0.1."""
        if self.launched is not None and self.launched.cluster_id is not None and self.launcher == "local" \
                and self.controller == "local":
            return "127.0.0.1"
        return ssh.controller_address(getattr(self.client, "_config", {}) or {})

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
            "controller_pid": self.launched.controller_pid if self.launched is not None else None,
            "profile": self.profile, "engines": engines}
        try:
            self._record = Home().write_cluster(record)
        except OSError:
            pass

    @property
    def cluster_tag(self) -> str:
        if self.launched is not None and self.launched.cluster_id is not None:
            return self.launched.cluster_id
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

    def _head(self):
        return f"workbench.Cluster {self._kind()} {'running' if self.running else 'stopped'}, {len(self.pool)} engines"

    def __repr__(self) -> str:
        head = f"<{self._head()}>"
        return head if not len(self.pool) else f"{head}\n{self.engines.to_string()}"

    def _repr_html_(self) -> str:
        head = f"<b>workbench.Cluster</b> {self._kind()}, {'running' if self.running else 'stopped'}, {len(self.pool)} engines"
        # what a notebook test compares: the text's first line (its engines' ids, PIDs and ports vary)
        return (f'<div data-wb-check="{html.escape(self._head())}">{head}'
                f'{self.engines.to_html() if len(self.pool) else ""}</div>')

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

    def recycle(self, engine_ids: list[int], same_ports: bool = False) -> dict[int, int]:
        """Replace engines ``engine_ids`` with fresh ones on the same ports. Returns {old: new}.

        Local engines are killed by PID (they may be blocked inside a TF collective, deaf
        to ipyparallel's shutdown request); remote ones are asked to shut down. A port an
        old engine's process still holds is not handed on, unless ``same_ports`` (a task
        replaced mid-run): then it is waited for (``EnginePool.recycle``).
        """
        self._require_running()
        return self.pool.recycle(engine_ids, same_ports=same_ports)

    # -- runs --------------------------------------------------------------------------
    def train(self, model: Callable[[], Any], data: Data | tuple | Callable[[Any], Any], *,
              loss: str | Callable[..., Any] = "sparse_categorical_crossentropy", optimizer: str | Any = "sgd",
              learning_rate: float | Any | None = None, momentum: float = 0.0,
              strategy: str = "multi_worker_mirrored", workers: int | None = None, ps: int | None = None,
              global_batch_size: int = 256, steps: int = 300, seed: int = 0, steps_per_execution: int | None = None,
              checkpoint_every: int = 100, eval_every: int = 0,
              variable_partitioner: int | tuple[str, int] | None = None, devices: int = 0,
              average_every: int | None = None, metrics: Sequence[str | Any] | None = None,
              eval_data: Data | tuple | Callable[[Any], Any] | None = None, stall_timeout: float = 60.0,
              start_timeout: float = 180.0, dashboard: bool | None = None, compression: str | None = None,
              bytes_per_pack: int = 0, gradient_delay: int = 0, anatomy: bool = True, logs: bool = True) -> Run:
        """Start a training run on the engines and return its ``Run`` at once.

        ``strategy``: "multi_worker_mirrored" (sync all-reduce over ``workers`` engines),
        "parameter_server" (async; 1 chief + ``ps`` + ``workers`` engines), "mirrored"
        (one engine, all its devices; ``devices=N`` splits the CPU into N logical ones),
        "parameter_averaging" (sync; ``workers`` engines train their own replicas and
        average them every ``average_every`` steps), "model_parallel" (a
        ``wb.models.split_mlp``'s stages, one per worker engine, run by a chief; ``workers``
        defaults to the stages) or "single" (one engine, one device). Every argument is
        checked here, before any engine is touched. ``dashboard``: show the live dashboard (default: when running
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
        rounding error back into the next step. ``bytes_per_pack``: TF's packing of that
        all-reduce (``CommunicationOptions``): the gradients, last layer first, grouped into
        packs that each take tensors until they hold more than this many bytes (the last may
        hold less), one all-reduce each, each paying its messages' latency (0: all in one
        pack). ``gradient_delay``: "single" only, each step applies the gradients computed
        that many steps before (the first ``gradient_delay`` steps apply none): the staleness
        every update of an asynchronous run of ``gradient_delay + 1`` equally fast workers
        has, emulated in one process (the gradients in waiting are checkpointed: a resumed run applies them in turn).
        ``anatomy``: time the pieces of every step
        (``run.anatomy()``). The bytes each step hands to the all-reduce (``comm_bytes`` in
        ``run.history``, and the dashboard's all-reduce line) are counted either way.
        ``logs``: capture every task's stdout and stderr, TensorFlow's C++ log included
        (``run.logs()``, the dashboard's Logs view, ``<run dir>/logs/<task>.log``).
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
            compression=compression, bytes_per_pack=bytes_per_pack, gradient_delay=gradient_delay, anatomy=anatomy,
            logs=logs,
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
            if self.launched is not None:
                self.launched.keep_standby({e.pid for e in self.pool.info.values()})
        return run

def _in_notebook():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _profile_path(profile):
    from IPython.paths import get_ipython_dir

    return Path(get_ipython_dir()) / f"profile_{profile}"
