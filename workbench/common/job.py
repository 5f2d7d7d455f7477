"""The description of one training run, built and validated in the kernel, shipped to
every engine of the run. Plain data: no TensorFlow."""

from dataclasses import dataclass, field


@dataclass
class Job:
    run_id: str
    run_dir: str
    strategy: str
    model: object  # callable -> keras.Model | tf.Module
    data: object  # workbench.datasets.Data | callable dataset_fn(input_context)
    loss: object  # name or callable(y_true, y_pred) -> per-example loss
    optimizer: object  # name or callable() -> keras optimizer
    learning_rate: object  # float | workbench.schedules.Warmup
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
    tasks: list = field(default_factory=list)  # roles.Task of every engine in the run
