"""The records the store keeps, as they are written, and what it serves to the panel.

``RunRecord`` is ``run.json`` (written at launch), ``ResultRecord`` is ``result.json``
(written when the run ends), ``ClusterRecord`` is ``clusters/<id>.json`` (while a cluster
runs). ``RunSummary`` and ``State`` are what ``Records`` reads back from them, served by the
panel's ``GET /workbench/api/state``: the panel's TypeScript interfaces
(``extensions/workbench-panel/src/index.ts``) re-state them, and ``tests/test_store.py``
checks the two agree.
"""

from typing import Any, Literal, NotRequired, TypedDict

Status = Literal["running", "finished", "stopped", "failed", "lost"]


class TaskRecord(TypedDict):
    """One task of a run: its role, the engine it ran on, that engine's host and PID."""

    role: str
    index: int
    engine: int
    host: str
    pid: int


class RunRecord(TypedDict):
    """``run.json``: what was launched, from which notebook and kernel, on which engines."""

    run_id: str  # the run's id, its directory's name: the same for every attempt
    attempt: NotRequired[int]  # 0 for the first launch, one more for each resume
    first_step: NotRequired[int]  # this attempt's first step (a resume's checkpoint + 1): figures count from it
    strategy: str
    workers: int
    ps: int
    devices: int
    steps: int
    global_batch_size: int
    steps_per_execution: NotRequired[int]  # steps per tf.function call (absent in runs recorded before it)
    compression: NotRequired[str | None]  # the all-reduce's precision (None: float32)
    average_every: NotRequired[int]  # parameter_averaging: steps between averages
    bytes_per_pack: NotRequired[int]  # the all-reduce's packs (0: one)
    gradient_delay: NotRequired[int]  # single: steps each update's gradients wait (0: none)
    started: float
    notebook: str | None
    kernel_pid: int
    profile: str | None  # the ipyparallel profile of an attached cluster, else None
    tasks: list[TaskRecord]
    msg_ids: NotRequired[dict[str, str]]  # attached clusters: task name -> ipyparallel message id


class ResultRecord(TypedDict):
    """``result.json``: how the run ended (the rest of what it was is in ``run.json``)."""

    final_step: int
    finished: float | None
    error: str | None  # the first line of the error it ended with
    stopped: bool
    evaluation: dict[str, Any] | None


class EngineRecord(TypedDict):
    id: int
    host: str
    pid: int
    role: str | None  # the TF state its latest run left ("worker:0 of multi_worker_mirrored"), or None
    device: str


class ClusterRecord(TypedDict):
    """``clusters/<id>.json``: a cluster's engines, while it runs."""

    id: str
    kernel_pid: int
    notebook: str | None
    controller_pid: int | None  # None for a cluster this kernel attached to
    profile: str | None
    engines: list[EngineRecord]


class RunSummary(TypedDict):
    """One run as the panel, ``wb.runs()`` and ``%wb`` list it."""

    run_id: str  # the run directory's name: a resumed run keeps it
    run_dir: str
    status: Status
    strategy: str | None
    workers: int | None
    ps: int | None
    steps: int | None
    step: int
    loss: float | None
    steps_per_s: float | None
    sparkline: list[float]
    error: str | None
    notebook: str | None
    tasks: list[TaskRecord]
    tensorboard: bool


class State(TypedDict):
    """What ``GET /workbench/api/state`` answers."""

    home: str
    clusters: list[ClusterRecord]
    runs: list[RunSummary]


class TaskStacksRecord(TypedDict):
    """One task's state, place and stacks (``common.hangs.TaskStacks.record``), as the
    watcher writes them to ``stacks.json`` and ``POST /workbench/api/runs/<id>/stacks``
    answers them for the panel's Stacks button."""

    task: str
    engine: int
    host: str
    pid: int | None
    state: str
    where: str
    read_by: str
    text: str
