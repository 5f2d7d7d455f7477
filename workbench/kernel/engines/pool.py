"""``EnginePool``: the engines a cluster trains on, and what the kernel knows of each.

The pool owns the engines' inventory (host, address, pid, TF port, devices), the
environment each got for its lifetime, the TensorFlow state each holds (``TFState``), and
the decisions made from them: which engines a run takes, which must be recycled first,
which are alive, which a failure left unusable, and which replaced engine stands in for
which. The processes themselves belong to the ``Cluster`` that started them: the pool
asks it (``restart``) to end engines and start new ones.
"""

import json
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from workbench.common import roles
from workbench.engine.startup import inventory
from workbench.errors import ClusterError
from workbench.kernel.engines.health import held
from workbench.kernel.engines.processes import alive, reap, wait_until

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class TFState:
    """The TensorFlow state an engine's process holds.

    ``fingerprint``: ``roles.fingerprint`` of the last task it ran (None: no TF state yet);
    ``usable``: False once a failure left it unusable (``EnginePool.condemn``): it is
    replaced on the cluster's next use."""

    fingerprint: tuple | None = None
    usable: bool = True

    @property
    def fresh(self) -> bool:
        return self.usable and self.fingerprint is None

    def describe(self) -> str:
        """How ``cluster.engines`` and the panel's record name this state."""
        if not self.usable:
            return "unusable, to be replaced"
        if self.fingerprint is None:
            return "fresh"
        kind, detail = self.fingerprint
        if kind == "local":
            return "local TF" + (f" ({detail} logical CPUs)" if detail else "")
        task = json.loads(detail)["task"]
        return f"cluster {task['type']}:{task['index']}"


FRESH = TFState()


class EnginesGone(ClusterError):
    """Engines a run was planned on were unregistered before it started (their host lost
    them after the last run, before the controller's heartbeat noticed): ``engine_ids``."""

    def __init__(self, engine_ids: list[int]) -> None:
        super().__init__(f"engines {engine_ids} were lost before the run started")
        self.engine_ids = engine_ids


class EnginePool:
    """The engines of one cluster: inventory, TF state, health, recycling, replacement.

    ``is_local(info)``: did a launcher of this kernel start that engine (may it be killed
    by PID)? ``restart(infos)``: end those engines and start as many new ones (on their
    hosts where the launcher can); raises ``ClusterError`` where it cannot; returns None,
    or every engine when the launcher restarted its whole job (MPI). ``on_change()``:
    the inventory or a TF state changed (the cluster rewrites its record). ``tag()``: the
    cluster's id, part of each engine's environment."""

    def __init__(self, timeout: float, *, is_local: Callable[[roles.EngineInfo], bool],
                 restart: Callable[[list[roles.EngineInfo]], list[roles.EngineInfo] | None], on_change: Callable[[], None],
                 tag: Callable[[], str], controller_host: Callable[[], str]) -> None:
        self.timeout = timeout
        self.client: Any = None  # the cluster's ipyparallel client, once connected
        self._is_local = is_local
        self._restart = restart
        self._on_change = on_change
        self._tag = tag
        self._controller_host = controller_host
        self._info: dict[int, roles.EngineInfo] = {}
        self._env: dict[int, dict] = {}  # engine id -> environment set before TF import
        self._debug: dict[int, dict] = {}  # engine id -> its debug thread (``debug_channel``)
        self._state: dict[int, TFState] = {}
        self._retired: set[int] = set()  # engine ids replaced by recycling
        self._busy: set[int] = set()  # attached: engines busy with a run of another kernel
        self._others: set[int] = set()  # engines of the controller that another cluster uses (``set_aside``)
        self._last: dict[tuple, list[int]] = {}  # topology -> engine ids of its last run
        self._warned = False  # the once-per-cluster warning about TF servers on a network
        self._unshared: set[tuple[str, ...]] = set()  # hosts warned about: no shared run directory

    # -- what the pool knows -----------------------------------------------------------
    def connect(self, client: Any) -> None:
        self.client = client

    def clear(self) -> None:
        """The cluster stopped: forget its engines."""
        self.client = None
        self._info.clear()
        self._state.clear()

    @property
    def info(self) -> dict[int, roles.EngineInfo]:
        """``{engine id: EngineInfo}`` of the engines in use (a copy)."""
        return dict(self._info)

    def __len__(self) -> int:
        return len(self._info)

    def state(self, engine_id: int) -> TFState:
        return self._state.get(engine_id, FRESH)

    def debug_channel(self, engine_id: int) -> dict | None:
        """Where engine ``engine_id``'s debug thread listens (``engine/startup/debug.py``):
        ``{"target", "token", "pid"}``, its process's own PID (on an SSH host whose engines
        fork from a zygote ``EngineInfo.pid`` is the launcher's stand-in); None for an
        engine whose inventory this kernel did not take (an attached run's busy engines)."""
        return self._debug.get(engine_id)

    def env(self, engine_id: int) -> dict:
        """The environment engine ``engine_id`` got before importing TF."""
        return dict(self._env.get(engine_id, {}))

    def describe(self) -> list[dict]:
        """One dict per engine, by id: what ``cluster.engines`` and the panel show."""
        return [{"engine": eid, "host": e.host, "address": e.address, "pid": e.pid, "tf_port": e.port,
                 "cpus": e.cpus, "gpus": e.gpus,
                 "cuda_visible_devices": self._env.get(eid, {}).get("CUDA_VISIBLE_DEVICES"),
                 "tf_state": self.state(eid).describe()}
                for eid, e in sorted(self._info.items())]

    # -- inventory ---------------------------------------------------------------------
    def find_busy(self, queue_status: dict) -> set[int]:
        """Engines of an attached cluster still running a task (``queue_status``: the
        client's): asking them for an inventory would wait for the end of their run. They
        join the pool when their run is re-attached (``adopt``)."""
        self._busy = {e for e, s in queue_status.items() if isinstance(s, dict) and s.get("queue")}
        return set(self._busy)

    def take_inventory(self, ids: Iterable[int], keep_ports: dict[str, list[int]] | None = None) -> None:
        """Ask engines ``ids`` what they are, then set their lifetime environment.

        ``keep_ports`` ({host: [port, ...]}) hands replaced engines' ports to new engines
        on the same host, so that the TF cluster spec of the other engines stays valid.
        """
        ids = list(ids)
        if not ids:  # attached, every engine busy with a run of another kernel
            self._on_change()
            return
        reports = self.client[ids].apply_async(inventory.report, self._controller_host()).get(timeout=self.timeout)
        taken = {(e.host, e.port) for e in self._info.values()}
        for eid, r in zip(ids, reports):
            reuse = (keep_ports or {}).get(r["host"])
            port = reuse.pop(0) if reuse else r["port"]
            while (r["host"], port) in taken:  # engines on one host pick ports independently
                port = self.client[eid].apply_sync(inventory.free_port)
            taken.add((r["host"], port))
            self._info[eid] = roles.EngineInfo(
                id=eid, host=r["host"], address=r["address"], pid=r["pid"], port=port,
                gpus=tuple(r["gpus"]), cpus=r["cpus"], tmp=r["tmp"],
            )
            self._debug[eid] = r["debug"]
            # what it holds from an earlier kernel's run (an attached or shared cluster)
            self._state[eid] = TFState(r.get("tf_state"))
        # GPU ranks are by engine id per host, so engines that join later do not move others'
        envs = roles.engine_env(list(self._info.values()), self._tag())
        pending = []
        for eid in ids:
            self._env[eid] = envs[eid]
            pending.append(self.client[eid].apply_async(inventory.configure, envs[eid]))
        for ar in pending:
            ar.get(timeout=self.timeout)
        if not self._warned:
            self._warned = warn_if_exposed(self._info.values())
        self._on_change()

    def set_aside(self, engine_ids: Iterable[int]) -> None:
        """Engines of this controller that are not this pool's (a test session's shared
        cluster lends some of its engines: ``testing/lender.py``): never taken, not even as
        the fresh engines a recycling waits for."""
        self._others.update(engine_ids)

    def take_late_inventory(self) -> list[int]:
        """Engines that registered after the last inventory (an attached cluster grows when
        its owner starts more): take the inventory of those not busy with another kernel's
        run, so that the next run can plan with them. Returns their ids."""
        if self.client is None:
            return []
        new = [e for e in self.client.ids if e not in self._info and e not in self._retired]
        if not new:
            return []
        busy = self.find_busy(self.client.queue_status())
        new = [e for e in new if e not in busy]
        if new:
            self.take_inventory(new)
        return new

    def adopt(self, tasks: Iterable[roles.Task], pids: dict[tuple[str, int], int]) -> None:
        """A re-attached run's engines (busy when this kernel attached) join the pool, in
        the state their tasks leave (``pids``: (role, index) -> pid, from ``run.json``)."""
        for t in tasks:
            if t.engine_id not in self._info:
                address, _, port = t.target.rpartition(":")
                self._info[t.engine_id] = roles.EngineInfo(
                    id=t.engine_id, host=t.host, address=address or t.host, pid=pids.get((t.role, t.index)) or 0,
                    port=int(port or 0))
            self._state[t.engine_id] = TFState(roles.fingerprint(t))
            self._busy.discard(t.engine_id)

    # -- runs ------------------------------------------------------------------------
    def plan(self, role_names: Iterable[str], workers: int, ps: int, multi_engine: bool,
             devices: int = 0) -> list[roles.Task]:
        """The tasks of a run, on the engines that need the fewest restarts (those its
        topology used last time first), with the engines whose TF state conflicts already
        recycled. Strategies with the same roles (MWMS and parameter averaging; single and
        mirrored) leave the same TF state: one may reuse the engines the other left."""
        topology = (tuple(role_names), workers, ps, devices)
        tasks = roles.best_plan(list(self._info.values()), self._fingerprints(), self._last.get(topology),
                                role_names, workers, ps, multi_engine, devices=devices)
        tasks = self.prepare(tasks)
        self._last[topology] = [t.engine_id for t in tasks]
        return tasks

    def prepare(self, tasks: list[roles.Task]) -> list[roles.Task]:
        """Make sure every engine in ``tasks`` can take its TF state; recycle those that can't.

        TF's multi-worker state is process-global (re-creating MultiWorkerMirroredStrategy
        with other ports hangs; a TF server cannot be re-bound), so an engine holding a
        different state is replaced by a fresh engine that keeps its port. Returns the
        tasks, re-targeted at replacement engines where needed.
        """
        stale = roles.engines_to_recycle(tasks, self._fingerprints())
        if stale:
            mapping = self.recycle(stale)
            tasks = _retarget_all(tasks, mapping, self._info)
        return tasks

    def _fingerprints(self) -> dict[int, Any]:
        """What ``roles`` plans with: id -> fingerprint (None: fresh); an unusable engine's
        state matches no task."""
        return {e: (s.fingerprint if s.usable else s) for e, s in self._state.items()}

    def mark(self, tasks: Iterable[roles.Task]) -> None:
        """These tasks run now: their engines hold the TF state they leave."""
        for t in tasks:
            self._state[t.engine_id] = TFState(roles.fingerprint(t))
        self._on_change()

    def hosts_without(self, tasks: Iterable[roles.Task], run_dir: str, started: float) -> list[str]:
        """The hosts of ``tasks``' engines that do not see the kernel's run directory
        ``run_dir`` (its ``run.json`` written at ``started``): no shared filesystem there.
        Engines a local launcher started share this machine's files and are not asked. Warns
        once per cluster and set of hosts (``warn_unshared_run_dir``). Raises ``EnginesGone``
        for engines that died unnoticed and are unregistered while asked."""
        remote = sorted({t.engine_id for t in tasks if not self.is_local(t.engine_id)})
        if not remote or self.client is None:
            return []
        try:
            seen = self.client[remote].apply_async(inventory.sees_run, run_dir, started).get(timeout=self.timeout)
        except Exception:
            gone = [e for e in remote if e not in self.client.ids]  # ids drop before their tasks fail
            if gone:
                raise EnginesGone(gone) from None
            raise
        hosts = sorted({self._info[e].host for e, ok in zip(remote, seen) if not ok})
        if hosts and tuple(hosts) not in self._unshared:
            self._unshared.add(tuple(hosts))
            warn_unshared_run_dir(run_dir, hosts)
        return hosts

    def send_stop(self, running: list[tuple[int, Any]]) -> None:
        """Ask running tasks to stop through ipyparallel (``running``: (engine id, its
        AsyncResult)): what tasks on hosts without the run directory's STOP file see."""
        if self.client is None:
            return
        live = set(self.client.ids)
        running = [(e, ar) for e, ar in running if e in live]
        if running:
            try:
                self.client.abort(jobs=[ar for _, ar in running], targets=[e for e, _ in running], block=False)
            except Exception:  # noqa: BLE001 - the STOP file was written too
                pass

    # -- health ------------------------------------------------------------------------
    def alive(self, engine_id: int) -> bool:
        """Is this engine still there? Local engines by PID (at once), others by registration."""
        info = self._info.get(engine_id)
        if info is None or self.client is None:
            return False
        if self._is_local(info):
            return alive(info.pid)
        return engine_id in self.client.ids

    def is_local(self, engine_id: int) -> bool:
        """Did a launcher of this kernel start this engine on this machine (by PID)?"""
        info = self._info.get(engine_id)
        return info is not None and self._is_local(info)

    def condemn(self, engine_ids: Iterable[int], kill: Iterable[int] = ()) -> None:
        """After a failure: these engines' TF state is unusable; kill the local ones still
        blocked (``kill``). Replacement happens in ``heal``, on the cluster's next use."""
        for e in engine_ids:
            if e in self._state:
                self._state[e] = replace(self._state[e], usable=False)
        pids = {self._info[e].pid for e in kill if e in self._info and self._is_local(self._info[e])}
        reap(pids, deadline=0)

    def heal(self, reachable_only: bool = False) -> None:
        """Replace engines that died or hold unusable TF state. ``reachable_only``: leave
        out engines on hosts this machine cannot reach (cut off the network: a replacement
        there cannot start, and trying took 40 s of SSH timeouts); they are replaced on the
        cluster's next use. Those are the remote engines whose TF port is silent, whether
        or not the controller has dropped them yet (a run names a peer it cannot reach
        sooner than the heartbeat drops its engine)."""
        if self.client is None:
            return
        bad = [e for e, info in self._info.items()
               if not self.state(e).usable or e not in self.client.ids
               or (self._is_local(info) and not alive(info.pid))]
        if reachable_only:
            from workbench.kernel.engines.health import answers

            targets = {e: f"{self._info[e].address}:{self._info[e].port}" for e in bad
                       if not self._is_local(self._info[e])}
            heard = answers(list(targets.values()), timeout=1.0)
            bad = [e for e in bad if heard.get(targets.get(e)) != "silent"]
        if bad:
            self.recycle(bad)

    # -- recycling ---------------------------------------------------------------------
    def recycle(self, engine_ids: Iterable[int], same_ports: bool = False) -> dict[int, int]:
        """Replace engines ``engine_ids`` with fresh ones on the same ports. Returns {old: new}.

        Registered engines outside the inventory (a local cluster's spare,
        ``Cluster.keep_standby``) are taken first; the engines the restart starts register
        later and become the next spares. A port an old engine's process still holds once
        the new ones registered (it outlives its kill: one forked by an SSH host's zygote
        ends when a thread of its own sees its launcher's stand-in gone, a stopped one not
        before it continues) is not handed on, or the new engine's TF server could not bind
        it (CI, stop 51); ``same_ports`` (a replacement mid-run, whose peers know the old
        port) waits up to ``timeout`` for it first."""
        engine_ids = sorted(engine_ids)
        old = {e: self._info[e] for e in engine_ids}
        # raises, the pool unchanged, where it cannot; a launcher that restarts its whole
        # job (MPI: every engine, under the same ids, rank = id) returns every old engine
        whole = self._restart(list(old.values()))
        if whole is not None:
            old = {o.id: o for o in whole}
        engine_ids = sorted(old)
        for e in engine_ids:
            del self._info[e]
            self._state.pop(e, None)
            self._env.pop(e, None)
            self._debug.pop(e, None)
        keep = set(self._info)

        def fresh():
            return sorted(set(self.client.ids) - keep - set(engine_ids) - self._retired - self._others)

        if whole is not None:  # the restart waited for the new job's engines
            new = sorted(self.client.ids)[: len(engine_ids)]
        else:
            wait_until(lambda: len(fresh()) >= len(engine_ids), self.timeout,
                       lambda: f"{len(engine_ids)} new engines; registered: {self.client.ids}")
            new = fresh()[: len(engine_ids)]
            self._retired.update(engine_ids)
        ports, targets = {}, {f"{o.address}:{o.port}": o for o in old.values()}
        taken = set(held(list(targets), within=self.timeout if same_ports else 0.0))
        for target, o in targets.items():
            if target not in taken:
                ports.setdefault(o.host, []).append(o.port)
        self.take_inventory(new, keep_ports=ports)
        by_host = {}
        for o in old.values():
            by_host.setdefault(o.host, []).append(o.id)
        mapping, leftovers = {}, []
        for n in new:  # a new engine replaces an old one on its own host where it can
            queue = by_host.get(self._info[n].host)
            if queue:
                mapping[queue.pop(0)] = n
            else:
                leftovers.append(n)
        for o in sorted(sum(by_host.values(), [])):
            mapping[o] = leftovers.pop(0)
        return mapping

    def retarget(self, task: roles.Task, mapping: dict[int, int]) -> roles.Task:
        """``task`` on its replacement engine (``mapping``: old id -> new id), mid-run: its
        peers know it by address and port, so a replacement reached elsewhere is refused."""
        if task.engine_id not in mapping:
            return task
        new = self._info.get(mapping[task.engine_id])
        if new is not None and task.target and f"{new.address}:{new.port}" != task.target:
            raise ClusterError(
                f"The replacement for {task.name} (engine {new.id}) is reached at {new.address}:{new.port} on "
                f"{new.host}, but the run's other tasks know {task.name} as {task.target} on {task.host}.")
        return replace(task, engine_id=mapping[task.engine_id])


def warn_if_exposed(engines: Iterable[roles.EngineInfo]) -> bool:
    """Warn (once per cluster: returns True when it did) that TensorFlow's servers of a
    cluster whose engines are reached on non-loopback addresses are open to that network."""
    exposed = sorted({e.address for e in engines if e.address not in _LOOPBACK and not e.address.startswith("127.")})
    if not exposed:
        return False
    warnings.warn(
        f"This cluster's engines are reached on {', '.join(exposed)}. TensorFlow's gRPC servers listen on "
        "every interface with no authentication or encryption (TensorFlow SECURITY.md: 'not built for use "
        "in an untrusted network'), so anyone who can reach these hosts' TF ports can run code in your "
        "training processes. Run such clusters only on a private network, or behind a firewall that admits "
        "only the cluster's own hosts.", UserWarning, stacklevel=3)
    return True


def warn_unshared_run_dir(run_dir: str, hosts: list[str]) -> None:
    """Warn that engines on ``hosts`` do not see the kernel's run directory: what the
    workbench does about it, and what does not work there."""
    warnings.warn(
        f"Engines on {', '.join(hosts)} do not see this kernel's run directory {run_dir} (no shared filesystem "
        "there). The workbench carries the run through ipyparallel instead: history, events and weights as "
        "always; while the run trains, those tasks' metrics and each checkpoint of the chief (with its "
        "TensorBoard logs) written here; run.stop(), and the STOP file of the CLI or the panel while this "
        "kernel watches the run, sent to the running tasks; a checkpoint copied to them for run.resume(). "
        "What does not work there: the STOP file once this kernel is gone, profiles and TensorBoard logs "
        "newer than the last checkpoint before the run ends. Give every host the kernel's directory "
        "(WORKBENCH_HOME on a shared filesystem, mounted at the same path on every host) for all of it.", UserWarning, stacklevel=4)


def _retarget_all(tasks: list[roles.Task], mapping: dict[int, int],
                  info: dict[int, roles.EngineInfo]) -> list[roles.Task]:
    """A run's tasks before it starts, with replaced engines swapped in and TF_CONFIG
    rebuilt from the addresses and ports the new engines reported."""
    moved = {}
    for t in tasks:
        if t.engine_id in mapping and t.target:
            e = info[mapping[t.engine_id]]
            moved[t.target] = f"{e.address}:{e.port}"
    out = []
    for t in tasks:
        eid = mapping.get(t.engine_id, t.engine_id)
        cfg = t.tf_config
        if cfg:
            cfg = dict(cfg, cluster={r: [moved.get(a, a) for a in addrs] for r, addrs in cfg["cluster"].items()})
        out.append(replace(t, engine_id=eid, host=info[eid].host if eid in info else t.host,
                           target=moved.get(t.target, t.target), tf_config=cfg))
    return out
