"""Baseline: one engine, all its devices, synchronous MirroredStrategy.

With ``devices=N`` the engine's CPU is split into N logical devices, standing in for
GPUs; this must happen before TensorFlow's runtime starts on the engine.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("mirrored")


def train(job: Job, ctx: dict) -> dict:
    import tensorflow as tf

    from workbench.engine import loop, placement

    placement.split_cpu(job.devices)
    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
    return loop.train_synchronous(tf.distribute.MirroredStrategy(devices), job, ctx)
