"""Baseline: one engine, all its devices, synchronous MirroredStrategy.

With ``devices=N`` the engine's CPU is split into N logical devices, standing in for
GPUs; this must happen before TensorFlow's runtime starts on the engine.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("mirrored")


from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    from workbench.common.protocols import TaskContext, TaskResult


def train(job: "Job", ctx: "TaskContext") -> "TaskResult":
    import tensorflow as tf

    from workbench.engine import placement, synchronous

    placement.split_cpu(job.devices)
    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
    return synchronous.train(tf.distribute.MirroredStrategy(devices), job, ctx)
