"""Asynchronous training with ParameterServerStrategy.

Worker and PS engines run a ``tf.distribute.Server`` kept alive in the engine process;
the chief engine runs the ``ClusterCoordinator`` and the training loop.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("parameter_server")


def train(job: Job, ctx: dict) -> dict:
    import time

    if ctx["task"].role in ("ps", "worker"):
        from workbench.engine import server

        info = server.ensure(ctx["task"])
        row = dict(ctx["task_row"], devices=info["devices"])
        return {"server": info["target"], "reused": info["reused"],
                "events": [{"kind": "placement", "tasks": [row], "variables": [], "time": time.time()}]}
    from workbench.engine import loop

    return loop.train_parameter_server(job, ctx)
