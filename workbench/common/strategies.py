"""What each strategy is: one ``StrategySpec`` per strategy, read by the kernel, the CLI and
the engines alike. Plain data: no TensorFlow.

The TensorFlow side of a strategy (its ``train(job, ctx)``) lives in
``workbench.engine.strategies.<name>``. Adding a strategy means adding a spec to
``_SPECS`` below and an adapter module of the same name; nothing else compares strategy
names.
"""

from dataclasses import dataclass

# roles a task may take, in launch order within a run
ROLE_ORDER = ("chief", "ps", "worker", "local")


def role_counts(roles: tuple[str, ...], workers: int, ps: int) -> dict[str, int]:
    """Tasks per role, in the order ``roles`` lists them: one chief, one local task,
    ``ps`` parameter servers, ``workers`` workers."""
    counts = {"chief": 1, "local": 1, "ps": ps, "worker": workers}
    return {role: counts[role] for role in roles}


@dataclass(frozen=True)
class StrategySpec:
    """One strategy, as the workbench plans, checks and runs it."""

    name: str
    roles: tuple[str, ...]  # the roles its tasks take, in launch order
    description: str  # one line for docs, help and error messages
    multi_engine: bool  # spans several engines joined by a TF cluster (TF_CONFIG)
    # workers move in lockstep over collectives and split each global batch between them
    # (such runs can hang when a peer is lost: the kernel watches them)
    synchronous: bool
    servers: bool = False  # its non-chief tasks run a tf.distribute.Server, started before the chief
    shards_variables: bool = False  # takes a variable_partitioner (variables on PS tasks)
    averages: bool = False  # averages the workers' parameters every ``average_every`` steps
    logical_devices: bool = False  # one engine whose CPU ``devices=N`` may split into N devices
    # its workers all-reduce gradients (or parameters) that ``compression=`` may send in 16/8 bits
    compressible: bool = False
    device_replicas: bool = False  # one replica per (logical) device of its engine
    delays_gradients: bool = False  # ``gradient_delay=k`` applies each step's gradients k steps later
    # its model is split into consecutive stages, one per worker engine (wb.models.split_mlp
    # with devices=workers), driven by the chief: the batch flows through every worker
    splits_model: bool = False
    elastic: tuple[str, ...] = ()  # what a resume may change ("workers", "ps")
    steps_per_execution: int = 10  # steps per tf.function call (per scheduled function under PS)
    # runs at least this long unroll full-length calls (faster, but the trace and first call
    # cost ~1.2 s here) and take ``unrolled_steps_per_execution`` steps per call
    unroll_min_steps: int | None = None
    unrolled_steps_per_execution: int | None = None

    def __post_init__(self) -> None:
        if not self.roles or any(r not in ROLE_ORDER for r in self.roles):
            raise ValueError(f"StrategySpec {self.name!r}: roles {self.roles!r} must be among {ROLE_ORDER}")

    @property
    def lockstep(self) -> bool:
        """Its tasks wait on each other every step (synchronous workers; a split model's
        stages): one lost or frozen task stops the run, which the kernel watches for."""
        return self.synchronous or self.splits_model

    @property
    def has_ps(self) -> bool:
        """Keeps variables on parameter-server tasks (needs ``ps >= 1``); its runs outlive a
        lost worker, which the workbench replaces."""
        return "ps" in self.roles

    @property
    def local(self) -> bool:
        """Runs as one "local" task on one engine, with no TF cluster."""
        return "local" in self.roles

    @property
    def chief_role(self) -> str | None:
        """The role of the task that checkpoints and writes results: "chief" where the
        strategy has one, else None (then worker 0, or the local task, does)."""
        return "chief" if "chief" in self.roles else None

    def role_counts(self, workers: int, ps: int) -> dict[str, int]:
        """Tasks per role for ``workers`` and ``ps``, in launch order."""
        return role_counts(self.roles, workers, ps)

    def with_defaults(self, workers: int | None, ps: int | None) -> tuple[int, int]:
        """``workers`` and ``ps`` as given, or where None (``Cluster.train``'s defaults) this
        strategy's own: one worker on a one-engine strategy, else two; one PS task where it
        has PS tasks, else none. A default never contradicts the strategy it goes with."""
        if workers is None:
            workers = 1 if self.local else 2
        if ps is None:
            ps = 1 if self.has_ps else 0
        return workers, ps

    def engines(self, workers: int, ps: int) -> int:
        """The number of engines a run with ``workers`` and ``ps`` needs."""
        return sum(self.role_counts(workers, ps).values())

    def replicas(self, workers: int, devices: int = 0) -> int:
        """Model replicas that split each global batch: one per worker of a synchronous
        strategy, one per logical device of a device-mirroring one, else 1."""
        if self.synchronous:
            return workers
        if self.device_replicas:
            return devices or 1
        return 1

    def deterministic(self, workers: int) -> bool:
        """Does a seeded run give the same numbers on every execution? Yes where updates
        apply in a fixed order: one process, lockstep workers, or parameter servers fed by
        one worker. Several parameter-server workers apply their updates as they arrive, in
        no fixed order. Measured here (digits MLP, 200 steps, seed 0, three runs on two
        clusters): every step's loss identical for single, mirrored, multi_worker_mirrored,
        parameter_averaging and parameter_server with one worker; parameter_server with two
        workers differed by up to 0.25 in a step's loss and 0.93 / 0.92 in test accuracy."""
        return not (self.has_ps and workers > 1)

    def shards(self, workers: int) -> int:
        """Shards of the training data: one per worker engine, or 1 on one engine or when
        the workers hold stages of one model (its first stage reads every batch)."""
        return workers if self.multi_engine and not self.splits_model else 1

    def default_steps_per_execution(self, steps: int) -> int:
        """Steps per call when the user gives none, for a run of ``steps`` steps."""
        if self.unroll_min_steps is not None and steps >= self.unroll_min_steps:
            return self.unrolled_steps_per_execution or self.steps_per_execution
        return self.steps_per_execution


_SPECS = (
    StrategySpec(
        name="multi_worker_mirrored", roles=("worker",), multi_engine=True, synchronous=True, compressible=True,
        description="synchronous all-reduce across worker engines (MultiWorkerMirroredStrategy)",
        elastic=("workers",),
    ),
    StrategySpec(
        name="parameter_server", roles=("chief", "ps", "worker"), multi_engine=True, synchronous=False,
        description="asynchronous training with variables on PS tasks (ParameterServerStrategy)",
        servers=True, shards_variables=True, elastic=("workers", "ps"),
        # an unrolled call runs faster than a loop but its trace and first call cost ~1.2 s
        # here (1.0-2.1). Measured on 2 cores, from train() to the last step, alternated: at
        # 500 steps both took the same time (medians: digits MLP 2.40 vs 2.31 s looped, wide
        # MLP 7.13 vs 7.17 s), at 600 the wide MLP finished 0.3-0.55 s sooner unrolled and
        # the digits MLP not yet, at 1,000 the digits MLP 0.25 s sooner; 20 unrolled steps
        # per call: x1.1-1.35 steps/s over 10 (digits MLP, 2 workers)
        unroll_min_steps=1000, unrolled_steps_per_execution=20,
    ),
    StrategySpec(
        name="parameter_averaging", roles=("worker",), multi_engine=True, synchronous=True,
        description="synchronous parameter averaging every k steps across worker engines (Deeplearning4j)",
        averages=True, compressible=True,
    ),
    StrategySpec(
        name="model_parallel", roles=("chief", "worker"), multi_engine=True, synchronous=False,
        description="one model split into stages across worker engines, driven by a chief (model parallelism)",
        servers=True, splits_model=True,
    ),
    StrategySpec(
        name="mirrored", roles=("local",), multi_engine=False, synchronous=False,
        description="one engine, all of its devices (MirroredStrategy)",
        logical_devices=True, device_replicas=True,
    ),
    StrategySpec(
        name="single", roles=("local",), multi_engine=False, synchronous=False,
        description="one engine, one device (the default strategy): the baseline",
        logical_devices=True, delays_gradients=True,
    ),
)
SPECS: dict[str, StrategySpec] = {s.name: s for s in _SPECS}


def per_call_defaults() -> str:
    """The strategies' own steps per call (``steps_per_execution=None``), in a few words."""
    text = " or ".join(str(n) for n in sorted({s.steps_per_execution for s in _SPECS}))
    for s in _SPECS:
        if s.unroll_min_steps is not None:
            text += f"; {s.unrolled_steps_per_execution} for {s.name} runs of {s.unroll_min_steps:,} steps or more"
    return text


def names() -> list[str]:
    """The names of all strategies, sorted."""
    return sorted(SPECS)


def spec(name: str) -> StrategySpec:
    """The spec of strategy ``name``: check the name first (``validate.choice``); an
    unknown one raises ``KeyError``."""
    return SPECS[name]


def with_flag(flag: str) -> list[str]:
    """The names of the strategies whose spec has ``flag`` set, sorted: for messages such
    as "only 'parameter_averaging' averages replicas"."""
    return [n for n in names() if getattr(SPECS[n], flag)]
