"""Model builders that can be shipped to engines: callables that import Keras when called.

``Cluster.train(model=...)`` takes any callable returning a ``keras.Model`` or a
``tf.Module``; these are ready-made ones that keep TensorFlow out of the kernel.
"""

from dataclasses import dataclass

from workbench.errors import invalid


@dataclass(frozen=True)
class MLP:
    """A multi-layer perceptron: ``hidden`` Dense layers, then a softmax over ``classes``."""

    hidden: tuple = (64, 32)
    classes: int = 10
    activation: str = "relu"
    dtype: str = "float32"

    def __call__(self):
        import keras

        layers = [keras.layers.Dense(h, activation=self.activation, dtype=self.dtype, name=f"dense_{i}")
                  for i, h in enumerate(self.hidden)]
        layers.append(keras.layers.Dense(self.classes, activation="softmax", dtype=self.dtype, name="output"))
        return keras.Sequential(layers, name="mlp")


def mlp(hidden=(64, 32), classes=10, activation="relu", dtype="float32"):
    """An MLP builder, e.g. ``wb.models.mlp((512,))`` for the wide 784-512-10 model."""
    hidden = tuple(hidden) if not isinstance(hidden, int) else (hidden,)
    if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hidden):
        raise invalid("hidden", hidden, "a tuple of layer widths, each an int >= 1")
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise invalid("classes", classes, "an int >= 2")
    if dtype not in ("float32", "float64", "float16", "mixed_float16"):
        raise invalid("dtype", dtype, "'float32', 'float64', 'float16' or 'mixed_float16'")
    return MLP(hidden, classes, activation, dtype)
