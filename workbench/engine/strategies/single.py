"""Baseline: one engine, one device, no tf.distribute cluster."""

ROLES = ("local",)
MULTI_ENGINE = False
DESCRIPTION = "one engine, one device (the default strategy): the baseline"


def train(job, ctx):
    import tensorflow as tf

    from workbench.engine import loop

    return loop.train_synchronous(tf.distribute.get_strategy(), job, ctx)
