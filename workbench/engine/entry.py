"""The function the kernel runs on each engine of a run."""

import os
import socket
import sys


def run_task(payload, task):
    """Set this task's TF_CONFIG, then hand over to the strategy adapter.

    ``payload`` is the cloudpickled ``Job``: the model and data functions a notebook
    defines live in ``__main__`` and travel by value.
    """
    import cloudpickle

    from workbench.engine import strategies

    job = cloudpickle.loads(payload)
    if task.tf_config:
        os.environ["TF_CONFIG"] = task.tf_config_json
    else:
        os.environ.pop("TF_CONFIG", None)
    name = task.name
    chief_role = "chief" if "chief" in strategies.get(job.strategy).ROLES else None
    is_chief = task.role == chief_role if chief_role else task.index == 0
    ctx = {
        "task": task,
        "name": name,
        "is_chief": is_chief,
        "task_row": {"role": task.role, "task": task.index, "engine": task.engine_id,
                     "host": socket.gethostname(), "pid": os.getpid(), "target": task.target},
    }
    before = _custom_gradients()
    try:
        return strategies.get(job.strategy).train(job, ctx)
    finally:
        _forget_custom_gradients(before)


def _custom_gradients():
    """The gradient functions ``tf.custom_gradient`` registered in graph mode, or None.

    Every trace that calls ``ReplicaContext.all_reduce`` (a Keras optimizer under any
    strategy does) registers one in TF's global gradient registry under a new name, and TF
    never removes it; it holds the traced graph, so each run left its graphs behind: 3 per
    engine per run here, about 1 MB of an engine's memory. A run's graphs are not used
    after it ends, so the names it added are removed when it ends."""
    ops = sys.modules.get("tensorflow.python.framework.ops")  # no TF import here: GPU engines import it later
    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    if not isinstance(registry, dict):
        return None
    return {name for name in registry if name.startswith("CustomGradient-")}


def _forget_custom_gradients(before):
    after = _custom_gradients()
    if after is None:
        return
    registry = sys.modules["tensorflow.python.framework.ops"]._gradient_registry._registry
    for name in after - (before or set()):
        registry.pop(name, None)


