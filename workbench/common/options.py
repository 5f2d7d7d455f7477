"""The training options of ``Cluster.train``, declared once: name, default, type and help.

``Cluster.train`` spells them out in its signature for users (docs, IDEs) and a test holds
that signature to this table; ``make_job`` takes its defaults from here; the CLI's
``train`` options are generated from it (``--global-batch-size`` for
``global_batch_size``); tests build their argument tables from ``defaults()``.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from workbench.common import strategies, validate


@dataclass(frozen=True)
class Option:
    """One keyword argument of ``Cluster.train``."""

    name: str
    default: object
    type: type  # what a command-line value converts to; ``object``: Python objects only (no CLI option)
    help: str
    job: bool = True  # part of the Job (``make_job``); False: how the kernel runs and shows it
    # what ``python -m workbench train --help`` says instead of ``help``, where that offers
    # Python objects a command line cannot pass, or explains a default of None
    cli_help: str = ""

    @property
    def cli(self) -> bool:
        """Offered by ``python -m workbench train`` as ``--name-with-dashes``."""
        return self.type is not object

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


TRAINING: tuple[Option, ...] = (
    Option("loss", "sparse_categorical_crossentropy", str,
           "a loss name, a keras.losses.Loss object, or a callable returning per-example losses",
           cli_help=" | ".join(validate.LOSSES)),
    Option("optimizer", "sgd", str,
           "sgd | adam | rmsprop | adagrad, a Keras optimizer object, or a callable returning one",
           cli_help=" | ".join(validate.OPTIMIZERS)),
    Option("learning_rate", None, float,
           "a number, wb.linear_scaling(...) or a Keras LearningRateSchedule (None: 0.1 for a named optimizer)",
           cli_help="the optimizer's learning rate (default: 0.1)"),
    Option("momentum", 0.0, float, "SGD momentum, in [0, 1)"),
    Option("strategy", "multi_worker_mirrored", str, " | ".join(strategies.SPECS)),
    Option("workers", None, int, "worker engines (None: 1 for single and mirrored, 2 for the others)",
           cli_help="worker engines (default: 1 for single and mirrored, 2 for the others)"),
    Option("ps", None, int, "parameter-server tasks, parameter_server only (None: 1 there, 0 for the others)",
           cli_help="parameter-server tasks, parameter_server only (default: 1 there, 0 for the others)"),
    Option("global_batch_size", 256, int, "examples per step over all replicas"),
    Option("steps", 300, int, "global steps to train"),
    Option("seed", 0, int, "seed of the model's initial weights and the data's shuffle"),
    Option("steps_per_execution", None, int,
           "steps per tf.function call (None: the strategy's default, "
           "see workbench.common.strategies)",
           cli_help=f"steps per tf.function call (default: {strategies.per_call_defaults()})"),
    Option("checkpoint_every", 100, int, "steps between checkpoints (0: only at the end)"),
    Option("eval_every", 0, int, "steps between evaluations (0: only at the end)"),
    Option("variable_partitioner", None, object,
           "parameter_server: None, a number of shards, or ('min_size', bytes)"),
    Option("devices", 0, int, "single and mirrored: split the engine's CPU into this many logical devices"),
    Option("average_every", None, int, "parameter_averaging: steps between averages (None: 1)",
           cli_help="parameter_averaging: steps between averages (default: 1)"),
    Option("metrics", None, object, "Keras metric names or objects, computed on each step's batch"),
    Option("eval_data", None, object, "what evaluation reads (None: the test split of numpy data)"),
    Option("stall_timeout", 60.0, float, "seconds a synchronous run may go without a step before it fails (RunStalled)", job=False),
    Option("start_timeout", 180.0, float, "seconds a run may take to its first step before it fails", job=False),
    Option("dashboard", None, object, "show the live dashboard (None: in a notebook kernel)", job=False),
    Option("compression", None, str,
           "multi_worker_mirrored, parameter_averaging: fp16 | bf16 | int8 instead of 32 bits: the all-reduce's precision",
           cli_help="multi_worker_mirrored, parameter_averaging: fp16 | bf16 | int8 instead of 32 bits: the "
                    "all-reduce's precision (default: 32 bits)"),
    Option("bytes_per_pack", 0, int,
           "multi_worker_mirrored, parameter_averaging: TF's packing of the all-reduce, gradients grouped into "
           "packs of about this many bytes or more, one all-reduce each (0: one pack)"),
    Option("gradient_delay", 0, int,
           "single: apply each step's gradients this many steps later, the staleness every update of an "
           "asynchronous run of gradient_delay + 1 equally fast workers has, emulated in one process (0: at once)"),
    Option("anatomy", True, bool, "time the pieces of every step (run.anatomy())"),
    Option("logs", True, bool, "capture every task's stdout and stderr, TensorFlow's C++ log included (run.logs())"),
)
COMPRESSION = ("fp16", "bf16", "int8")  # ``compression=``: what the all-reduce may send instead of float32
BY_NAME: dict[str, Option] = {o.name: o for o in TRAINING}


def defaults(job_only: bool = False) -> dict[str, object]:
    """Every option's default by name (``job_only``: the options ``make_job`` takes)."""
    return {o.name: o.default for o in TRAINING if o.job or not job_only}


def complete(given: Mapping[str, object], caller: str = "make_job") -> dict[str, object]:
    """The Job options ``given`` by name, with the defaults of those left out; a name that
    is not a Job option is a ``TypeError``, as Python says it for a function's keywords."""
    for name in given:
        if name not in BY_NAME or not BY_NAME[name].job:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
    return {**defaults(job_only=True), **given}
