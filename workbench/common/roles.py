"""Roles, ports, TF_CONFIG and environment, computed from what engines report.

Pure functions: no TensorFlow, no processes, no sockets. The kernel calls them with the
inventory the engines sent back; tests call them with made-up multi-host layouts.
"""

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from workbench.common.strategies import role_counts


@dataclass(frozen=True)
class EngineInfo:
    """What one engine reports about itself (see ``workbench.engine.startup.inventory``)."""

    id: int
    host: str
    address: str  # an address its peers can reach
    pid: int
    port: int  # a port reserved for this engine's TF server, stable for its lifetime
    gpus: tuple = ()  # accelerator indices visible on its host
    cpus: int = 1
    tmp: str = "/tmp"


@dataclass(frozen=True)
class Task:
    """One engine's part in one run."""

    engine_id: int
    role: str  # "chief" | "worker" | "ps" | "local"
    index: int
    host: str
    target: str  # "address:port" its peers dial, or "" for local runs
    tf_config: dict = field(default_factory=dict)
    devices: int = 0  # logical CPU devices a local run splits the engine into (0: as found)

    @property
    def name(self) -> str:
        """``"role:index"``: how metrics, results and errors name the task."""
        return f"{self.role}:{self.index}"

    @property
    def tf_config_json(self) -> str:
        return json.dumps(self.tf_config, sort_keys=True) if self.tf_config else ""


def local_ranks(engines: Iterable[EngineInfo]) -> dict[int, int]:
    """Map engine id -> its rank among the engines on the same host (ordered by id)."""
    ranks, seen = {}, {}
    for e in sorted(engines, key=lambda e: e.id):
        ranks[e.id] = seen.get(e.host, 0)
        seen[e.host] = ranks[e.id] + 1
    return ranks


def startup_env() -> dict[str, str]:
    """What every engine sets before importing TensorFlow (local engines at their start):
    ``GRPC_FAIL_FAST=use_caller`` (a lost peer is an error, not a hang) and TensorFlow's C++
    log level, ``TF_CPP_MIN_LOG_LEVEL``: 2 (errors only) unless this process's environment
    sets it (the kernel's, which local engines inherit: 0 shows TensorFlow's info lines in
    the task logs, where its start-up notices are folded)."""
    return {"GRPC_FAIL_FAST": "use_caller", "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}


def engine_tmpdir(tmp: str, cluster_tag: str, engine_id: int | str) -> str:
    """The private ``TMPDIR`` of one engine (``engine_id="*"``: a glob of all of a cluster's)."""
    return f"{tmp.rstrip('/')}/workbench-{cluster_tag}-engine{engine_id}"


def engine_env(engines: Sequence[EngineInfo], cluster_tag: str) -> dict[int, dict[str, str]]:
    """The environment each engine keeps for its lifetime, set before TF is imported.

    One engine owns one GPU: ``CUDA_VISIBLE_DEVICES`` is the GPU at the engine's local
    rank on its host, or empty (CPU only) for engines beyond the host's GPU count. Hosts
    without GPUs get no ``CUDA_VISIBLE_DEVICES`` at all. ``TMPDIR`` is private to the
    engine; ``GRPC_FAIL_FAST=use_caller`` makes a lost peer an error, not a hang.
    """
    ranks = local_ranks(engines)
    envs = {}
    for e in engines:
        env = dict(startup_env(), TMPDIR=engine_tmpdir(e.tmp, cluster_tag, e.id))
        if e.gpus:
            rank = ranks[e.id]
            env["CUDA_VISIBLE_DEVICES"] = str(e.gpus[rank]) if rank < len(e.gpus) else ""
        envs[e.id] = env
    return envs


def assign(engines: Sequence[EngineInfo], roles: Sequence[str], workers: int,
           ps: int) -> list[tuple[EngineInfo, str, int]]:
    """Pick engines for each role, in the order ``roles`` lists them.

    Returns ``[(engine, role, index), ...]``. Engines are taken in the order given, spread
    round-robin over hosts when there are several, so that tasks of one kind do not pile
    onto one machine.
    """
    pool = _interleave_hosts(engines)
    out = []
    for role, count in role_counts(roles, workers, ps).items():
        for index in range(count):
            out.append((pool[len(out)], role, index))
    return out


def _interleave_hosts(engines):
    by_host = {}  # hosts in the order their first engine comes: a previous run's order is kept
    for e in engines:
        by_host.setdefault(e.host, []).append(e)
    hosts = list(by_host)
    out = []
    while any(by_host.values()):
        for h in hosts:
            if by_host[h]:
                out.append(by_host[h].pop(0))
    return out


def plan(engines: Sequence[EngineInfo], roles: Sequence[str], workers: int, ps: int, multi_engine: bool,
         devices: int = 0) -> list[Task]:
    """Tasks of one run: roles, task indices, and each task's TF_CONFIG.

    ``engines`` are used in the order given. ``roles`` and ``multi_engine`` come from the
    strategy's spec (``workbench.common.strategies``). Local strategies get one "local" task and no TF_CONFIG.
    """
    picked = assign(engines, roles, workers, ps)
    if not multi_engine:
        e, role, index = picked[0]
        return [Task(e.id, role, index, e.host, "", devices=devices)]
    check_addresses([e for e, _, _ in picked])
    cluster = {}
    for e, role, _ in picked:
        cluster.setdefault(role, []).append(f"{e.address}:{e.port}")
    tasks = []
    for e, role, index in picked:
        tf_config = {"cluster": cluster, "task": {"type": role, "index": index}}
        tasks.append(Task(e.id, role, index, e.host, f"{e.address}:{e.port}", tf_config))
    return tasks


def check_addresses(engines: Sequence[EngineInfo]) -> None:
    """Refuse a TF cluster whose engines on different hosts report loopback addresses:
    each would dial its own machine for the others' tasks."""
    hosts = {e.host for e in engines}
    looped = sorted(f"engine {e.id} on {e.host}: {e.address}" for e in engines
                    if e.address.startswith("127.") or e.address in ("localhost", "::1"))
    if len(hosts) > 1 and looped:
        from workbench.errors import ClusterError

        raise ClusterError(
            f"This run's engines are on {len(hosts)} hosts ({', '.join(sorted(hosts))}), but some report a "
            f"loopback address ({'; '.join(looped)}), which their peers on other hosts cannot reach. Start the "
            "controller on an address the hosts reach (Cluster(controller_ip=...)), so that each engine reports "
            "the address of its own connection to it.")


# what ``fingerprint`` returns: ("local", logical devices) or ("cluster", TF_CONFIG as JSON)
Fingerprint = tuple[str, int | str]


def fingerprint(task: Task) -> Fingerprint:
    """The TF process state a task leaves behind on its engine.

    Two runs may share an engine only if they leave the same fingerprint: TF's
    multi-worker state is process-global, and a server cannot be re-bound.
    """
    if not task.tf_config:
        return ("local", task.devices)
    return ("cluster", task.tf_config_json)


def best_plan(engines: Sequence[EngineInfo], state: Mapping[int, Fingerprint | None], previous: Sequence[int] | None,
              roles: Sequence[str], workers: int, ps: int, multi_engine: bool, devices: int = 0) -> list[Task]:
    """The plan that restarts the fewest engines.

    Candidates: the engines a previous run of the same topology used, in the same order
    (``previous``: engine ids, or None); fresh engines first; engines in the local state a
    one-engine run needs first; all engines by id. Ties go
    to the earlier candidate, so an unchanged topology lands on the same engines.
    """
    by_id = sorted(engines, key=lambda e: e.id)
    candidates = []
    if previous and all(any(e.id == p for e in by_id) for p in previous):
        first = [next(e for e in by_id if e.id == p) for p in previous]
        candidates.append(first + [e for e in by_id if e.id not in previous])
    candidates.append(sorted(by_id, key=lambda e: state.get(e.id) is not None))
    # a one-engine run leaves the same state on any engine: one that already has it will do
    local = ("local", devices)
    candidates.append(sorted(by_id, key=lambda e: state.get(e.id) not in (None, local)))
    candidates.append(by_id)
    plans = [plan(order, roles, workers, ps, multi_engine, devices) for order in candidates]
    return min(plans, key=lambda p: len(engines_to_recycle(p, state)))


def engines_to_recycle(tasks: Sequence[Task], state: Mapping[int, Fingerprint | None]) -> list[int]:
    """Engine ids whose TF state (``state``: id -> fingerprint or None) conflicts with ``tasks``.

    A collective group (a cluster of workers only: MultiWorkerMirroredStrategy, parameter
    averaging) is reusable only whole: an engine keeping its group state while a peer is a
    new process hangs in the group's first collective, even on the same ports. So unless
    every task finds its engine already in its state, every engine with a state goes.
    """
    conflicts = [t.engine_id for t in tasks if state.get(t.engine_id) not in (None, fingerprint(t))]
    collective = bool(tasks) and set(tasks[0].tf_config.get("cluster", {})) == {"worker"}
    if collective and any(state.get(t.engine_id) != fingerprint(t) for t in tasks):
        conflicts = [t.engine_id for t in tasks if state.get(t.engine_id) is not None]
    return sorted(conflicts)
