"""Synchronous all-reduce over worker engines: MultiWorkerMirroredStrategy (SPMD).

Every worker runs this same function; all must be inside the strategy call at once.
TF_CONFIG is set on the engine before this runs.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("multi_worker_mirrored")


from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    from workbench.common.protocols import TaskContext, TaskResult


def train(job: "Job", ctx: "TaskContext") -> "TaskResult":
    import tensorflow as tf

    from workbench.engine import synchronous

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    return synchronous.train(strategy, job, ctx)
