"""The function the kernel runs on each engine of a run."""

from __future__ import annotations

import os
import socket
import sys
from typing import TYPE_CHECKING, Union

from workbench.common.protocols import TaskContext

if TYPE_CHECKING:
    from workbench.common.protocols import ServerResult, TaskResult, TaskRow
    from workbench.common.roles import Task


def run_task(payload: bytes, task: Task) -> Union[TaskResult, ServerResult]:
    """Set this task's TF_CONFIG, then hand over to the strategy adapter.

    ``payload`` is the cloudpickled ``Job``: the model and data functions a notebook
    defines live in ``__main__`` and travel by value. The strategy's ``train`` gets the
    job and this task's ``TaskContext``; what it returns goes back to the kernel.

    The task's stdout and stderr are captured meanwhile (``tasklogs``; ``job.logs``); a
    server task's capture goes on after it returns, until the kernel ends it with the run.
    """
    import threading

    import cloudpickle

    from workbench.common.roles import fingerprint
    from workbench.common.strategies import spec
    from workbench.engine import control, strategies, tasklogs
    from workbench.engine.startup import inventory, start

    # the job may hold Keras classes (an optimizer's, a metric's): unpickling them imports
    # Keras modules, which must not race the start-up import of TensorFlow and Keras in its
    # thread (seen: "cannot import name 'Optimizer' from partially initialized module")
    for thread in threading.enumerate():
        if thread.name == start.THREAD:
            thread.join()
    job = cloudpickle.loads(payload)
    inventory.hold(fingerprint(task))
    if task.tf_config:
        os.environ["TF_CONFIG"] = task.tf_config_json
    else:
        os.environ.pop("TF_CONFIG", None)
    name = task.name
    chief_role = spec(job.strategy).chief_role
    is_chief = task.role == chief_role if chief_role else task.index == 0
    row: TaskRow = {"role": task.role, "task": task.index, "engine": task.engine_id,
                    "host": socket.gethostname(), "pid": os.getpid(), "target": task.target}
    ctx = TaskContext(task=task, name=name, is_chief=is_chief, task_row=row)
    before = set(_gradient_registry())
    control.begin()
    if job.logs:
        offset = tasklogs.begin(job.run_dir, name)
    else:
        tasklogs.end()
    serving = False
    try:
        result = strategies.adapter(job.strategy).train(job, ctx)
        serving = "server" in result
        if serving and job.logs:  # the kernel reads its lines from its file from there on (runs/watcher.py)
            result["log_offset"] = offset
        return result
    finally:
        if not serving:
            tasklogs.end()
        control.end()
        registry = _gradient_registry()
        for key in set(registry) - before:
            if key.startswith("CustomGradient-"):
                del registry[key]


def _gradient_registry() -> dict:
    """TF's global gradient registry (a dict by op type name), or {} before TF is imported.

    Every trace that calls ``ReplicaContext.all_reduce`` (a Keras optimizer under any
    strategy does) registers a ``tf.custom_gradient`` there under a new name, and TF never
    removes it; it holds the traced graph, so each run left 3 graphs behind on each engine
    (bench/README.md: how much memory). A run's graphs are not used after it ends, so ``run_task``
    removes the names the run added."""
    ops = sys.modules.get("tensorflow.python.framework.ops")  # no TF import here: GPU engines import it later
    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else {}
