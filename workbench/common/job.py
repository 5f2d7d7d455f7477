"""The description of one training run, built and validated in the kernel, shipped to
every engine of the run. Plain data: no TensorFlow."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Job:
    run_id: str
    run_dir: str
    strategy: str
    model: object  # callable -> keras.Model | tf.Module
    data: object  # workbench.datasets.Data | callable dataset_fn(input_context)
    loss: object  # name, callable(y_true, y_pred) -> per-example loss, or a keras.losses.Loss
    optimizer: object  # name, callable() -> keras optimizer, or FromConfig of a Keras optimizer
    learning_rate: object  # float | workbench.schedules.Warmup | a Keras LearningRateSchedule | None
    momentum: float
    global_batch_size: int
    steps: int
    seed: int
    workers: int
    ps: int
    steps_per_execution: int
    checkpoint_every: int  # 0: only at the end
    eval_every: int  # 0: only at the end
    stop_check_every: int  # sync runs agree on stopping every this many steps
    variable_partitioner: object = None  # None | int shards | ("min_size", bytes)
    devices: int = 0  # mirrored: split the CPU into this many logical devices (0: as found)
    average_every: int = 1  # parameter_averaging: average the replicas every this many steps
    resume: bool = False
    attempt: int = 0  # 0: the run's first launch; each resume adds one (the run id stays)
    first_step: int = 1  # this attempt's first step: a resume's checkpoint step + 1 (common/figures.py)
    launch: str = ""  # new for every launch (kernel/runs/launch.py): names what its engines build together
    tasks: list = field(default_factory=list)  # roles.Task of every engine in the run
    metrics: tuple = ()  # Keras metric names and FromConfig of Keras metric objects
    accuracy: bool = False  # metrics=["accuracy"]: see classifies
    eval_data: object = None  # None (data's test split) | Data | callable dataset_fn(input_context)
    loss_name: str = ""  # the loss as Keras names it ("sparse_categorical_crossentropy", ...)
    compression: object = None  # None | "fp16" | "bf16" | "int8": the all-reduce's precision (engine/compression.py)
    bytes_per_pack: int = 0  # the all-reduce's packs (TF's CommunicationOptions): 0, one pack
    gradient_delay: int = 0  # single: each step applies the gradients of the step this many before (engine/step.py: delayed)
    anatomy: bool = True  # time the pieces of every step (common/anatomy.py)
    logs: bool = True  # capture each task's stdout and stderr (engine/tasklogs.py)
    # hosts whose engines do not see run_dir (set at launch): a chief there sends each
    # checkpoint and its TensorBoard logs to the kernel as it writes them (engine/loop.save)
    unshared_hosts: tuple = ()

    @property
    def metric_names(self) -> list[str]:
        """The columns the run's metrics take in its step rows."""
        return [m if isinstance(m, str) else m.config["name"] for m in self.metrics]

    @property
    def classifies(self) -> bool:
        """Every step reports its accuracy, and evaluation ``test_accuracy``: with a loss of
        sparse labels, or when ``metrics`` asked for "accuracy". Which accuracy is resolved
        on the engine from the labels' and outputs' shapes, as Keras' ``compile`` resolves
        it (``engine.keras_metrics.accuracy``)."""
        return self.loss_name == "sparse_categorical_crossentropy" or self.accuracy


@dataclass(frozen=True)
class FromConfig:
    """A Keras object the user built in the kernel (an optimizer, a metric), shipped as its
    class and config and rebuilt on each engine: under the strategy's scope where it makes
    variables, never sharing the kernel's. Objects in the config (a learning-rate schedule)
    travel as they are."""

    cls: type
    config: dict

    def build(self) -> Any:
        return self.cls.from_config(dict(self.config))

    def __repr__(self) -> str:
        return f"{self.cls.__name__}(...)"
