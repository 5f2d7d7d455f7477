"""Synchronous all-reduce over worker engines: MultiWorkerMirroredStrategy (SPMD).

Every worker runs this same function; all must be inside the strategy call at once.
TF_CONFIG is set on the engine before this runs.
"""

ROLES = ("worker",)
MULTI_ENGINE = True
SYNC_WORKERS = True
DESCRIPTION = "synchronous all-reduce across worker engines (MultiWorkerMirroredStrategy)"


def train(job, ctx):
    import tensorflow as tf

    from workbench.engine import loop

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    return loop.train_synchronous(strategy, job, ctx)
