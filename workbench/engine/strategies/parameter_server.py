"""Asynchronous training with ParameterServerStrategy.

Worker and PS engines run a ``tf.distribute.Server`` kept alive in the engine process;
the chief engine runs the ``ClusterCoordinator`` and the training loop.
"""

ROLES = ("chief", "ps", "worker")
MULTI_ENGINE = True
SYNC_WORKERS = False
DESCRIPTION = "asynchronous training with variables on PS tasks (ParameterServerStrategy)"


def train(job, ctx):
    import time

    if ctx["task"].role in ("ps", "worker"):
        from workbench.engine import server

        info = server.ensure(ctx["task"])
        row = dict(ctx["task_row"], devices=info["devices"])
        return {"server": info["target"], "reused": info["reused"],
                "events": [{"kind": "placement", "tasks": [row], "variables": [], "time": time.time()}]}
    from workbench.engine import loop

    return loop.train_parameter_server(job, ctx)
