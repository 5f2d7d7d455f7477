"""What crosses a process boundary between the kernel and the engines, typed.

Engines return and publish plain dicts (they travel through ipyparallel and land in JSON
lines files), so the shapes are ``TypedDict``s: they document and type-check the keys
without changing what is sent. The engine-side task context, which stays in one process,
is a dataclass. No TensorFlow here: the kernel, the CLI and the server extension import it.

Who writes what:

- ``inventory.report`` (engine -> kernel, once per engine): ``Inventory``;
- ``entry.run_task`` (kernel -> engine, one per task of a run): builds a ``TaskContext``
  and returns a ``TaskResult`` (a trainer) or a ``ServerResult`` (a PS-run server);
- ``metrics.Publisher`` (engine -> kernel while a run trains, and ``metrics/<task>.jsonl``):
  ``Published`` windows of ``StepRow``s and ``Event``s;
- the kernel adds the events it observes itself (``worker_lost`` and the like, and the
  faults injected on a test bed: ``injected``).
"""

from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict, Union

from workbench.common.roles import Fingerprint, Task


class Inventory(TypedDict):
    """What an engine reports about itself (``workbench.engine.startup.inventory.report``)."""

    host: str
    address: str  # the address its peers on the controller's network reach
    pid: int
    port: int  # a free port reserved for its TF server
    gpus: list[int]
    cpus: int
    tmp: str
    tf_state: Fingerprint | None  # of the last task it ran (``roles.fingerprint``); None: no TF state yet
    debug: dict  # its debug thread (``engine/startup/debug.py``): {"target", "token", "pid"}


class StepRow(TypedDict):
    """One training step of one worker, as the engines publish it.

    A run's metrics (``metrics=["mae"]``) add one float column each, named as given; a
    ``TypedDict`` cannot name them, so they are extra keys of the same row."""

    step: int
    worker: str  # the task name, "role:index" ("worker:1")
    loss: float  # this worker's mean loss over its shard of the step
    accuracy: float  # its correct predictions / its examples (0 when the run does not classify)
    step_time: float  # seconds
    examples_per_s: float
    replicas: int
    time: float  # time.time() when it was recorded (parameter server: when the worker's call ended, its clock)
    staleness: NotRequired[int]  # parameter-server steps: updates applied since this one read the step
    # the step's anatomy (train(anatomy=True), common/anatomy.py), seconds and bytes
    input_time: NotRequired[float]  # waiting for its batch
    compute_time: NotRequired[float]  # forward, backward, local update
    comm_time: NotRequired[float]  # the all-reduce (waits for peers included), or the push to PS tasks
    comm_bytes: NotRequired[int]  # bytes handed to the all-reduce's collectives
    wait_time: NotRequired[float]  # parameter-server steps: the worker idle between its calls


class TaskRow(TypedDict):
    """One task of a placement event: where it runs."""

    role: str
    task: int
    engine: int
    host: str
    pid: int
    target: str  # "address:port" of its TF server, "" for local runs
    devices: NotRequired[list[str]]  # its own logical devices


class VariableRow(TypedDict):
    """One variable (one shard of a sharded one) of a placement event."""

    variable: str
    shape: tuple[int, ...]
    bytes: int
    device: str  # "/job:ps/replica:0/task:0/device:CPU:0", "" when unknown
    kind: Literal["model", "optimizer"]
    trainable: NotRequired[bool]  # a gradient is computed and sent for it (absent in older runs)


EventKind = Literal["placement", "checkpoint", "eval", "profile", "worker_lost", "worker_replaced",
                    "worker_not_replaced", "injected", "run_dir_unshared", "run_files_not_copied",
                    "engines_not_replaced", "hang", "sparse_gradients"]


class _Event(TypedDict):
    time: float


class PlacementEvent(_Event):
    kind: Literal["placement"]
    tasks: list[TaskRow]
    variables: list[VariableRow]


class CheckpointEvent(_Event):
    kind: Literal["checkpoint"]
    step: int
    model_steps: NotRequired[int]  # parameter-server runs: the model's own step counter
    seconds: NotRequired[float]  # the chief's time to write it (and send it, from an unshared host)


class EvalEvent(_Event):
    """Evaluation on the chief: ``test_loss``, ``test_accuracy`` when the run classifies,
    and ``test_<metric>`` for each of the run's metrics (extra keys)."""

    kind: Literal["eval"]
    step: int
    test_loss: float
    test_accuracy: NotRequired[float]


class ProfileEvent(_Event):
    """A task's trace of ``Run.profile`` (``engine/profile.py``): seconds per step its op
    kernels spent in each category."""

    kind: Literal["profile"]
    id: int
    task: str
    logdir: str
    first: int  # the first and last step traced
    last: int
    steps: int
    ops: int
    input: float
    compute: float
    communication: float


class TaskEvent(_Event):
    """What the kernel observed about a task of a run (not published by engines)."""

    kind: Literal["worker_lost", "worker_replaced", "worker_not_replaced"]
    task: str
    step: int
    engine: NotRequired[int]
    error: NotRequired[str]


class FaultEvent(_Event):
    """A fault injected on a test bed's host while the run trained (``kernel/links.py``; not
    published by engines): ``fault`` names the ``Testbed`` method ("set_link", "link_down",
    "link_up", "kill_engines"), its details follow."""

    kind: Literal["injected"]
    fault: str
    host: str
    step: int
    rate: NotRequired[str]  # set_link: the new rate ("50mbit", "unshaped")
    pids: NotRequired[list[int]]  # kill_engines: the engines killed


class HostEvent(_Event):
    """What the kernel noted about a run's hosts: engines on ``hosts`` that do not see the
    run directory (at launch); their files not copied back at the run's end, or engines a
    failure left unusable not replaced when ``wait()`` raised (``error``)."""

    kind: Literal["run_dir_unshared", "run_files_not_copied", "engines_not_replaced"]
    step: int
    hosts: NotRequired[list[str]]
    error: NotRequired[str]


class HangEvent(_Event):
    """A synchronous run that stopped stepping, as the kernel read it (``common/hangs.py``):
    the tasks the others wait for (``stuck``, none when the stacks did not tell; not
    ``tasks``, which other events give as rows), why, and every task's stacks as text."""

    kind: Literal["hang"]
    step: int
    stuck: list[str]
    cause: str
    stacks: dict[str, str]


Event = Union[PlacementEvent, CheckpointEvent, EvalEvent, ProfileEvent, TaskEvent, FaultEvent, HostEvent, HangEvent]


class Evaluation(TypedDict):
    """An evaluation's result: an ``EvalEvent`` without ``kind`` and ``time``."""

    step: int
    test_loss: float
    test_accuracy: NotRequired[float]


class Metrics(TypedDict):
    """Rows and events together: what ``RunDir.read_metrics`` reads back from a run's
    metrics files, and what the kernel merges from a finished task's result."""

    rows: list[StepRow]
    events: list[Event]


class Published(TypedDict):
    """One window of what an engine publishes while a run trains (``publish_data``): its
    last rows, packed (``engine/metrics.py``'s ``pack``: (keys, values) tuples), its last
    events, and how many rows the task has made so far (``n``: the kernel merges only the
    rows it has not merged yet). Each replaces the last."""

    packed: list[tuple[tuple, tuple]]
    events: list[Event]
    n: int


class TaskResult(TypedDict):
    """What a training task returns to the kernel when it ends."""

    rows: list[StepRow]
    events: list[Event]
    final_step: int
    stopped: bool  # it ended at an agreed stop, before its last step
    evaluation: Evaluation | None  # the chief's final evaluation
    weights: list | None  # the chief's model weights (numpy arrays)


class ServerResult(TypedDict):
    """What a parameter-server run's worker or PS task returns: its server is up."""

    server: str  # its target, "grpc://address:port"
    log_offset: NotRequired[int]  # where its capture's lines begin in its log file (engine/entry.py), if it captures
    reused: bool  # the engine's server was already running for the same cluster
    events: list[PlacementEvent]


@dataclass(frozen=True)
class TaskContext:
    """What a task knows about itself on its engine, given to the strategy's ``train``."""

    task: Task
    name: str  # task.name, "role:index"
    is_chief: bool  # the task that evaluates, writes TensorBoard and keeps the checkpoints
    task_row: TaskRow  # its placement row, without devices
