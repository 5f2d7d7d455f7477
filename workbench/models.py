"""Model builders that can be shipped to engines: callables that import Keras when called.

``Cluster.train(model=...)`` takes any callable returning a ``keras.Model`` or a
``tf.Module``; these are ready-made ones that keep TensorFlow out of the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from workbench.common import validate
from workbench.errors import invalid

if TYPE_CHECKING:
    import keras
    import tensorflow as tf


@dataclass(frozen=True)
class MLP:
    """A multi-layer perceptron: ``hidden`` Dense layers, then a softmax over ``classes``."""

    hidden: tuple = (64, 32)
    classes: int = 10
    activation: str = "relu"
    dtype: str = "float32"

    def __call__(self) -> keras.Model:
        import keras

        layers = [keras.layers.Dense(h, activation=self.activation, dtype=self.dtype, name=f"dense_{i}")
                  for i, h in enumerate(self.hidden)]
        layers.append(keras.layers.Dense(self.classes, activation="softmax", dtype=self.dtype, name="output"))
        return keras.Sequential(layers, name="mlp")


def mlp(hidden: int | Sequence[int] = (64, 32), classes: int = 10, activation: str = "relu",
        dtype: str = "float32") -> MLP:
    """An MLP builder, e.g. ``wb.models.mlp((512,))`` for the wide 784-512-10 model."""
    hidden = tuple(hidden) if not isinstance(hidden, int) else (hidden,)
    if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hidden):
        raise invalid("hidden", hidden, "a tuple of layer widths, each an int >= 1")
    validate.positive_int("classes", classes, minimum=2)
    if dtype not in ("float32", "float64", "float16", "mixed_float16"):
        raise invalid("dtype", dtype, "'float32', 'float64', 'float16' or 'mixed_float16'")
    return MLP(hidden, classes, activation, dtype)


@dataclass(frozen=True)
class SplitMLP:
    """The MLP split across devices, layer by layer (model parallelism): its layers are cut
    into ``devices`` consecutive stages and stage i's variables and computation are placed
    on the engine's i-th CPU device (``train(strategy="single", devices=N)`` makes them).
    Every cut sends the activations forward and their gradients back, each step."""

    hidden: tuple = (64, 32)
    classes: int = 10
    devices: int = 2
    activation: str = "relu"

    def stages(self) -> tuple[int, ...]:
        """The stage (device index) of each layer, hidden layers then the output."""
        n = len(self.hidden) + 1
        return tuple(i * self.devices // n for i in range(n))

    def __call__(self) -> keras.Model:
        import keras
        import tensorflow as tf

        widths = tuple(self.hidden) + (self.classes,)
        acts = [self.activation] * len(self.hidden) + ["softmax"]
        names = [f"dense_{i}" for i in range(len(self.hidden))] + ["output"]
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(cpus) < self.devices:
            raise ValueError(f"Invalid value for argument 'devices'. Received: {len(cpus)} CPU device(s) on the "
                             f"engine. Expected {self.devices}: train with devices={self.devices}.")
        placed = [(cpus[s], keras.layers.Dense(w, activation=a, name=n))
                  for s, w, a, n in zip(self.stages(), widths, acts, names)]

        class Split(keras.Model):
            def __init__(self):
                super().__init__(name="split_mlp")
                self.placed = placed
                self.dense_layers = [layer for _, layer in placed]

            def build(self, input_shape):
                shape = tuple(input_shape)
                for device, layer in self.placed:
                    with tf.device(device):
                        layer.build(shape)
                    shape = shape[:-1] + (layer.units,)
                self.built = True

            def call(self, x, training=False):
                for device, layer in self.placed:
                    with tf.device(device):
                        x = layer(x)
                return x

        return Split()


def split_mlp(hidden: int | Sequence[int] = (64, 32), classes: int = 10, devices: int = 2) -> SplitMLP:
    """An MLP whose consecutive layers live on ``devices`` different devices (model
    parallelism). Train it with ``strategy="single", devices=N``."""
    base = mlp(hidden, classes)
    if validate.positive_int("devices", devices) > len(base.hidden) + 1:
        raise invalid("devices", devices, f"an int from 1 to {len(base.hidden) + 1} (one stage per layer at most)")
    return SplitMLP(base.hidden, base.classes, devices)


@dataclass(frozen=True)
class ModuleMLP:
    """The MLP as a plain ``tf.Module``: no Keras layers, so ParameterServerStrategy can
    shard its variables with a ``variable_partitioner`` (Keras 3 layers cannot)."""

    input_dim: int
    hidden: tuple = (64, 32)
    classes: int = 10
    seed: int = 0

    def __call__(self) -> tf.Module:
        import tensorflow as tf

        sizes = (self.input_dim,) + tuple(self.hidden) + (self.classes,)
        seed = self.seed

        class Net(tf.Module):
            def __init__(self):
                super().__init__(name="module_mlp")
                self.kernels, self.biases = [], []
                for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
                    limit = (6.0 / (a + b)) ** 0.5  # Glorot uniform, as Keras' Dense
                    name = "output" if i == len(sizes) - 2 else f"dense_{i}"
                    self.kernels.append(tf.Variable(
                        tf.random.stateless_uniform((a, b), seed=[seed, i], minval=-limit, maxval=limit),
                        name=f"{name}/kernel"))
                    self.biases.append(tf.Variable(tf.zeros([b]), name=f"{name}/bias"))

            def __call__(self, x):
                for i, (w, b) in enumerate(zip(self.kernels, self.biases)):
                    x = tf.matmul(x, w) + b
                    x = tf.nn.relu(x) if i < len(self.kernels) - 1 else tf.nn.softmax(x)
                return x

        return Net()


def module_mlp(input_dim: int, hidden: int | Sequence[int] = (64, 32), classes: int = 10, seed: int = 0) -> ModuleMLP:
    """A ``tf.Module`` MLP, for sharded variables: ``wb.models.module_mlp(64)`` for digits."""
    validate.positive_int("input_dim", input_dim)
    base = mlp(hidden, classes)
    return ModuleMLP(input_dim, base.hidden, base.classes, seed)


@dataclass(frozen=True, eq=False)
class Rebuilt:
    """A Keras model made in the notebook's kernel (``train(model=keras.Sequential([...]))``),
    shipped as Keras saves one: its config (``keras.saving.serialize_keras_object``, without
    its compile settings: the run brings its own loss, optimizer and metrics), the classes of
    its own custom layers, and its weights as numpy arrays. Each engine rebuilds it under its
    strategy's scope, as ``keras.models.clone_model`` clones a model, and sets the weights; an
    instance not built yet has none, and is built on the engine from the data, seeded.
    Until called it is plain data: unpickling it runs no TensorFlow op, which an engine must
    not do before its strategy exists (the model itself, unpickled there, did)."""

    config: dict
    weights: tuple
    custom_objects: dict

    def __call__(self) -> keras.Model:
        import keras

        model = keras.saving.deserialize_keras_object(self.config, custom_objects=self.custom_objects)
        if self.weights:
            model.set_weights(list(self.weights))
        return model

    def __repr__(self) -> str:
        return f"<{self.config.get('class_name')} {self.config.get('config', {}).get('name')!r}, rebuilt from its config>"


def rebuilt(model: keras.Model) -> Rebuilt:
    """``model``, a Keras model instance of this process, as a ``Rebuilt`` engines can ship and call."""
    import keras

    config = dict(keras.saving.serialize_keras_object(model))
    config.pop("compile_config", None)
    custom = {keras.saving.get_registered_name(type(layer)): type(layer)
              for layer in model._flatten_layers() if not type(layer).__module__.startswith("keras.")}
    return Rebuilt(config, tuple(np.asarray(w) for w in model.get_weights()), custom)
