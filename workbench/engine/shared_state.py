"""What parameter-server steps write to variables that other workers' steps write at the
same time, beside the gradients: a model's non-trainable state and the optimizer's step
count, each update applied whole on its PS task (docs/guide.md, "A model's state under
parameter servers")."""

from __future__ import annotations

from typing import Any, Self

from workbench.engine import build


class Increments:
    """A step's changes to a Keras model's non-trainable state (BatchNormalization's moving
    statistics, a Dropout layer's seed, a layer's own counters), written as increments:
    ``with Increments(model) as state:`` around the model's call (and its loss: the
    model's ``losses`` are read inside), then ``state.push()``.

    Each variable is read once when the step begins; the call runs on those values, as
    Keras' ``stateless_call`` runs a model (``keras.StatelessScope``: the call's writes are
    kept, not applied); ``push`` then gives every variable the call changed ``new - old``
    with its own ``assign_add``, one op on the task that holds it.

    For parameter servers, where every worker's steps write the same variables: Keras
    writes this state as ``v.assign(f(v))``, a read and a write several round trips apart,
    and two workers' steps that overlap there lose one's update. On digits (a
    Conv2D-BatchNormalization-Dropout CNN, 400 steps, 1 PS + 2 workers) 106-126 of the 400
    updates of the moving statistics were lost: the moving variance, which starts at 1.0,
    ended at 2.5-2.9 times single's, and the model in inference mode scored 0.83-0.90 on
    the test set against single's 0.95-0.97. TensorFlow's own parameter-server loop loses
    them too (docs/guide.md, bench/batchnorm.py). An increment is to this state what a
    gradient is to a trainable variable: applied whole on the PS, computed from a value
    another worker may have moved since. A layer that stores a value rather than
    accumulating one (``v.assign(x)`` with ``x`` not computed from ``v``) gets, when two
    steps overlap, the other step's change added to its own."""

    def __init__(self, m: Any) -> None:
        import keras
        import tensorflow as tf

        self.variables = list(m.non_trainable_variables) if build.keras_model(m) else []
        self.scope = keras.StatelessScope([(v, tf.convert_to_tensor(v.value)) for v in self.variables],
                                          collect_losses=True)
        self.read = [self.scope.get_current_value(v) for v in self.variables]

    def __enter__(self) -> Self:
        self.scope.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.scope.__exit__(*exc)

    def push(self) -> None:
        """``assign_add(new - old)`` for each variable the call changed."""
        for v, old in zip(self.variables, self.read):
            new = self.scope.get_current_value(v)
            if new is not old:
                v.value.assign_add(new - old, read_value=False)


def count_atomically(opt: Any) -> None:
    """The optimizer counts its updates (``iterations``, which a learning-rate schedule and
    Adam's bias correction follow) with one ``assign_add`` op on the counter's task. Keras
    3's own ``assign_add`` is a read and an assign (``assign(v + 1)``): under parameter
    servers with 2 workers it counted 317-336 of 400 updates (TensorFlow's own loop,
    330-360), so a decaying learning rate decayed late (see ``Increments``)."""
    import tensorflow as tf

    counter = opt._iterations  # ``iterations`` is a tensor when Keras accumulates gradients

    def assign_add(value: Any) -> Any:
        return counter.value.assign_add(tf.cast(value, counter.value.dtype), read_value=False)

    counter.assign_add = assign_add
