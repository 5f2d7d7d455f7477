"""What a step and an evaluation measure besides the loss, on the engine: the run's accuracy,
resolved as Keras' ``compile`` resolves ``metrics=["accuracy"]``, and the user's Keras
metrics, computed statelessly so that they run inside any strategy's replica function."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from workbench.common.job import Job


def accuracy_kind(y: Any, pred: Any) -> str:
    """What "accuracy" means for labels ``y`` and outputs ``pred``, from their shapes, as Keras'
    ``compile`` resolves ``metrics=["accuracy"]`` (``is_binary_or_sparse_categorical`` in
    keras/src/trainers/compile_utils.py): one output unit: "binary"; labels of lower rank
    than the outputs, or one label per example against several outputs: "sparse"; else
    "categorical" (one-hot labels)."""
    if pred.shape[-1] == 1:
        return "binary"
    if len(y.shape) < len(pred.shape) or y.shape[-1] == 1 and pred.shape[-1] > 1:
        return "sparse"
    return "categorical"


def accuracy(y: Any, pred: Any) -> tf.Tensor:
    """Each example's accuracy (1.0 right, 0.0 wrong; a mean over its values when it has
    several outputs, multi-label binary ones), by Keras' own function of ``accuracy_kind``."""
    import keras
    import tensorflow as tf

    fn = {"binary": keras.metrics.binary_accuracy, "sparse": keras.metrics.sparse_categorical_accuracy,
          "categorical": keras.metrics.categorical_accuracy}[accuracy_kind(y, pred)]
    values = tf.cast(fn(y, pred), tf.float32)
    return tf.reduce_mean(values, axis=list(range(1, values.shape.rank))) if values.shape.rank > 1 else values


def metrics(job: Job) -> list[tuple[str, Any, list[np.ndarray]]]:
    """``[(column, metric, initial state)]``: each of the run's Keras metrics, built on this
    engine from its name or its class and config, outside any strategy's scope. Steps
    compute them statelessly on their own batch from the initial state (see
    ``metric_values``), so they work under every strategy and keep no state across steps."""
    import keras
    import numpy as np

    from workbench.common.job import FromConfig

    out = []
    for spec in job.metrics:
        if isinstance(spec, FromConfig):
            metric = spec.build()
        else:
            try:
                found = keras.metrics.get(spec)
            except ValueError:
                raise ValueError(f"Invalid value for argument 'metrics'. Received: metrics={spec!r}. Expected the name "
                                 "of a Keras metric (keras.metrics.get knows it) or a keras.metrics.Metric "
                                 "object.") from None
            if isinstance(found, type):
                metric = found()
            elif isinstance(found, keras.metrics.Metric):
                metric = found
            else:
                metric = keras.metrics.MeanMetricWrapper(found, name=spec)
        out.append((spec if isinstance(spec, str) else metric.name, metric,
                    [np.asarray(v.value) for v in metric.variables]))
    return out


def metric_values(metrics: list, y: tf.Tensor, pred: tf.Tensor) -> list[tf.Tensor]:
    """Each metric's value on this batch alone: its update and result from its initial
    state, without touching its variables (Keras' stateless API), so any metric runs inside
    a replica function under any strategy, parameter servers included."""
    import tensorflow as tf

    values = []
    for _, metric, initial in metrics:
        state = metric.stateless_update_state([tf.constant(v) for v in initial], y, pred)
        values.append(tf.cast(metric.stateless_result(state), tf.float32))
    return values
