"""Baseline: one engine, one device, no tf.distribute cluster.

With ``devices=N`` the engine's CPU is split into N logical devices that a model may place
its layers on (model parallelism, e.g. ``wb.models.split_mlp``); training still runs as
one process with no strategy.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("single")


from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    from workbench.common.protocols import TaskContext, TaskResult


def train(job: "Job", ctx: "TaskContext") -> "TaskResult":
    import tensorflow as tf

    from workbench.engine import placement, synchronous

    placement.split_cpu(job.devices)
    return synchronous.train(tf.distribute.get_strategy(), job, ctx)
