"""Keras objects given to ``Cluster.train`` (a loss, an optimizer, a learning-rate schedule,
metrics), checked in the kernel and turned into what engines rebuild.

The kernel never imports Keras for this: a user who passes a Keras object has imported it
already, so it is looked up in ``sys.modules`` (as anywidget does), and a name is checked
against Keras' own tables only when Keras is loaded; otherwise the engine checks it before
training, with the same message.
"""

import re
import sys
from collections.abc import Sequence
from typing import Any

from workbench.common import validate
from workbench.common.job import FromConfig
from workbench.errors import invalid

# columns every step row already has: a metric may not take their names
_RESERVED = {"step", "worker", "loss", "accuracy", "time", "elapsed", "step_time", "examples_per_s", "replicas",
             "staleness"}


def _keras_class(path):
    """``keras.<path>`` if Keras is loaded in this process, else None."""
    keras = sys.modules.get("keras")
    if keras is None:
        return None
    obj = keras
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _is(value, path):
    cls = _keras_class(path)
    return cls is not None and isinstance(value, cls)


def _snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def model(value: Any) -> Any:
    """What engines call to build the run's model: ``value`` itself when it is such a
    callable, or, for a Keras model instance made in this kernel, a ``models.Rebuilt`` of its
    config and weights, rebuilt here once first (what every engine will do: a model Keras
    cannot rebuild is refused now, not on each engine). A ``tf.Module`` instance has no
    config to rebuild it from: refused, asking for the function that makes it."""
    from workbench import models

    label = f"<{type(value).__name__} object>"
    if _is(value, "Model"):
        try:
            spec = models.rebuilt(value)
            spec()
        except Exception as e:
            raise invalid("model", label, "a Keras model that Keras rebuilds from its config and weights (as "
                          "keras.models.clone_model does), or a function that builds it; rebuilding it failed: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        return spec
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(value, tf.Module):
        raise invalid("model", label, "a function that returns the tf.Module, called on each engine (an instance "
                      "has no config to rebuild it from there), for example wb.models.module_mlp(...)")
    if not callable(value):
        raise invalid("model", value, "a callable that returns a keras.Model or tf.Module "
                      "(for example wb.models.mlp() or a function that builds one), or a keras.Model")
    return value


def loss(value: Any) -> tuple[Any, str]:
    """``(loss, name)``: a name from ``validate.LOSSES``, a ``keras.losses.Loss`` object (any
    reduction) or a callable returning per-example losses; ``name`` is the loss as Keras
    names it ("sparse_categorical_crossentropy"), which decides whether steps count
    correct predictions."""
    if _is(value, "losses.Loss"):
        fn = getattr(value, "fn", None)
        return value, getattr(fn, "__name__", None) or _snake(type(value).__name__)
    if callable(value) and not isinstance(value, str):
        return value, getattr(value, "__name__", "")
    if not isinstance(value, str):
        raise invalid("loss", value, "a loss name such as 'sparse_categorical_crossentropy', a keras.losses.Loss "
                      "object, or a callable(y_true, y_pred) -> per-example losses")
    return validate.choice("loss", value, validate.LOSSES), value


def optimizer(value: Any, learning_rate: Any, momentum: float) -> tuple[Any, Any]:
    """``(optimizer, learning_rate)`` to put in the Job.

    A name takes ``learning_rate`` (0.1 when None: a number, ``wb.linear_scaling`` or a
    Keras ``LearningRateSchedule``) and ``momentum`` (SGD). A Keras optimizer object brings
    its own rate or schedule, clipping and weight decay: it travels as its class and
    config and is rebuilt on every engine; so does a callable returning one. Either way a
    ``learning_rate`` given beside it would be ignored, so it is refused."""
    if _is(value, "optimizers.Optimizer") or callable(value):
        if learning_rate is not None:
            raise invalid("learning_rate", learning_rate,
                          f"None with optimizer={_label(value)}, which brings its own learning rate "
                          "(build it with the rate or schedule you want)")
        if momentum:
            raise invalid("momentum", momentum, f"0 with optimizer={_label(value)} (set it in the optimizer)")
        if callable(value) and not _is(value, "optimizers.Optimizer"):
            return value, None
        config = value.get_config()
        rate = getattr(value, "_learning_rate", None)
        if not isinstance(config.get("learning_rate"), (int, float)) and rate is not None:
            config["learning_rate"] = rate  # a schedule travels as itself, custom classes included
        return FromConfig(type(value), config), None
    if not isinstance(value, str):
        raise invalid("optimizer", value, "one of " + ", ".join(repr(o) for o in validate.OPTIMIZERS)
                      + ", a keras.optimizers.Optimizer object, or a callable that returns one")
    validate.choice("optimizer", value, validate.OPTIMIZERS)
    if momentum and value != "sgd":
        raise invalid("momentum", momentum, f"0 with optimizer={value!r} (momentum applies to 'sgd')")
    return value, learning_rate_arg(learning_rate)


def learning_rate_arg(value: Any) -> Any:
    """None (0.1 on the engines), a finite number > 0, ``wb.linear_scaling``, or a Keras
    ``LearningRateSchedule`` object (it travels as itself)."""
    from workbench import schedules

    if value is None or _is(value, "optimizers.schedules.LearningRateSchedule"):
        return value
    return schedules.check("learning_rate", value)


def _label(value):
    if _is(value, "optimizers.Optimizer"):
        return f"<{type(value).__name__} object>"
    return getattr(value, "__name__", repr(value))


def metrics(value: Sequence[Any] | None) -> tuple[tuple[str | FromConfig, ...], bool]:
    """``(metrics, accuracy)``: a tuple of metric names and ``FromConfig`` of metric objects,
    each named by the column it gets in ``run.history``, and whether "accuracy" (or "acc") was
    asked for. That one is the built-in ``accuracy`` column and ``test_accuracy``, resolved on
    the engines from the labels' and outputs' shapes as Keras' ``compile`` resolves it
    (binary, sparse categorical or categorical accuracy), whatever the loss."""
    if value is None:
        return (), False
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise invalid("metrics", value, "a list of Keras metric names or keras.metrics.Metric objects, "
                      "for example ['sparse_top_k_categorical_accuracy']")
    out, names, accuracy = [], set(), False
    get = _keras_class("metrics.get")
    for m in value:
        if isinstance(m, str):
            if m in ("accuracy", "acc"):
                accuracy = True
                continue
            if m in _RESERVED or m in names:
                raise invalid("metrics", m, "metric names that are not already columns of run.history "
                              f"({', '.join(sorted(_RESERVED | names))}): pass the metric with name=...")
            if get is not None:
                try:
                    get(m)
                except ValueError:
                    raise invalid("metrics", m, "the name of a Keras metric (keras.metrics.get knows it) "
                                  "or a keras.metrics.Metric object") from None
            name, spec = m, m
        elif _is(m, "metrics.Metric"):
            name, spec = m.name, FromConfig(type(m), m.get_config())
        else:
            raise invalid("metrics", m, "a Keras metric name or a keras.metrics.Metric object")
        if name in _RESERVED or name in names:
            raise invalid("metrics", name, "metric names that are not already columns of run.history "
                          f"({', '.join(sorted(_RESERVED | names))}): pass the metric with name=...")
        names.add(name)
        out.append(spec)
    return tuple(out), accuracy
