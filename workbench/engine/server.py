"""A ``tf.distribute.Server`` kept alive in the engine process for PS and worker tasks.

TF cannot stop a server or bind a second one to the same port, so an engine hosts at
most one, for one cluster spec; the kernel recycles the engine when the spec changes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.common.protocols import ServerResult, TaskContext
    from workbench.common.roles import Task

_SERVER = {}  # {"spec": TF_CONFIG json, "server": tf.distribute.Server}


def ensure(task: Task) -> dict[str, Any]:
    """This engine's server for ``task``'s cluster, started once: ``{"target", "reused",
    "devices", "pid"}``."""
    from workbench.engine import placement

    if _SERVER:
        if _SERVER["spec"] != task.tf_config_json:
            raise RuntimeError(
                "This engine already runs a TF server for another cluster spec; "
                "the kernel should have recycled it (workbench bug)."
            )
        return {"target": _SERVER["server"].target, "reused": True, "devices": placement.devices(task), "pid": os.getpid()}
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=task.role, task_index=task.index, protocol="grpc", start=True
    )
    _SERVER.update(spec=task.tf_config_json, server=server)
    return {"target": server.target, "reused": False, "devices": placement.devices(task), "pid": os.getpid()}


def serve(ctx: TaskContext) -> ServerResult:
    """A task that only serves (a parameter-server run's worker or PS task, a model-parallel
    run's worker): its server started (or kept), and its placement row; the chief drives it."""
    import time

    info = ensure(ctx.task)
    row = dict(ctx.task_row, devices=info["devices"])
    return {"server": info["target"], "reused": info["reused"],
            "events": [{"kind": "placement", "tasks": [row], "variables": [], "time": time.time()}]}
