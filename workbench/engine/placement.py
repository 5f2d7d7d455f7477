"""Where a run's variables live, read on the engine after the model is built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.common.protocols import VariableRow
    from workbench.common.roles import Task


def variables(m: Any, task: Task, opt: Any = None) -> list[VariableRow]:
    """A row per variable (a row per shard of a sharded one): the model's, then the
    optimizer's state (its step counter, learning rate and slots such as Adam's m and v),
    with ``kind`` "model" or "optimizer", and whether it is ``trainable``."""
    import numpy as np
    import tensorflow as tf

    rows = []
    own = list(m.weights if hasattr(m, "weights") else m.variables)
    state = list(getattr(opt, "variables", None) or [])
    for kind, found in (("model", own), ("optimizer", state)):
        for v in found:
            for part in getattr(v, "variables", None) or [v]:  # ShardedVariable -> shards
                rows.append({
                    "variable": getattr(v, "path", None) or v.name,
                    "shape": tuple(int(d) for d in part.shape),
                    "bytes": int(np.prod(part.shape)) * tf.as_dtype(part.dtype).size,
                    "device": _device(part),
                    "kind": kind,
                    "trainable": bool(getattr(v, "trainable", False)),  # its gradient is sent (cost model)
                })
    return rows


def _device(v):
    import tensorflow as tf

    for candidate in (getattr(v, "value", None), v):
        try:
            device = candidate.device
        except (AttributeError, ValueError, RuntimeError):
            continue
        if isinstance(device, str) and device:
            return tf.DeviceSpec.from_string(device).to_string()
    return ""


def split_cpu(n: int) -> None:
    """Split this engine's CPU into ``n`` logical devices standing in for GPUs (0: leave it
    whole). Must run before TensorFlow's runtime starts on the engine."""
    import tensorflow as tf

    if n:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)


def devices(task: Task) -> list[str]:
    """This task's own logical devices (a coordinator also sees every remote one)."""
    import tensorflow as tf

    own = f"/job:{task.role}/replica:0/task:{task.index}/"
    names = [d.name for d in tf.config.list_logical_devices()]
    return [n for n in names if "/job:" not in n or n.startswith(own)]
