"""Baseline: one engine, one device, no tf.distribute cluster.

With ``devices=N`` the engine's CPU is split into N logical devices that a model may place
its layers on (model parallelism, e.g. ``wb.models.split_mlp``); training still runs as
one process with no strategy.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("single")


def train(job: Job, ctx: dict) -> dict:
    import tensorflow as tf

    from workbench.engine import loop, placement

    placement.split_cpu(job.devices)
    return loop.train_synchronous(tf.distribute.get_strategy(), job, ctx)
