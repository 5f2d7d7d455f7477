"""Synchronous all-reduce over worker engines: MultiWorkerMirroredStrategy (SPMD).

Every worker runs this same function; all must be inside the strategy call at once.
TF_CONFIG is set on the engine before this runs.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("multi_worker_mirrored")


def train(job: Job, ctx: dict) -> dict:
    import tensorflow as tf

    from workbench.engine import loop

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    return loop.train_synchronous(strategy, job, ctx)
