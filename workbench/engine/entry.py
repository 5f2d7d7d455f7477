"""The function the kernel runs on each engine of a run."""

import os
import socket


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
    return strategies.get(job.strategy).train(job, ctx)


