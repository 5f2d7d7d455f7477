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
    into ``devices`` consecutive stages (``stages``: each layer's, hidden layers then the
    output; None: as even as the layers allow) and stage i's variables and computation are
    placed on device i. On one engine those are its CPU's logical devices
    (``train(strategy="single", devices=N)`` makes them); under ``strategy="model_parallel"``
    stage i lives on worker engine i (``/job:worker/task:i``), which the chief running the
    model is connected to. Every cut sends the activations forward and their gradients
    back, each step."""

    hidden: tuple = (64, 32)
    classes: int = 10
    devices: int = 2
    activation: str = "relu"
    layer_stages: tuple | None = None

    def stages(self) -> tuple[int, ...]:
        """The stage (device index) of each layer, hidden layers then the output."""
        if self.layer_stages is not None:
            return tuple(self.layer_stages)
        n = len(self.hidden) + 1
        return tuple(i * self.devices // n for i in range(n))

    def cut_widths(self) -> tuple[int, ...]:
        """The width of each cut: the output width of every layer whose successor is on the
        next stage. A cut moves ``costmodel.cut_bytes(batch, width)`` per step."""
        stages = self.stages()
        return tuple(w for w, a, b in zip(self.hidden, stages, stages[1:]) if a != b)

    def __call__(self) -> keras.Model:
        import keras
        import tensorflow as tf

        widths = tuple(self.hidden) + (self.classes,)
        acts = [self.activation] * len(self.hidden) + ["softmax"]
        names = [f"dense_{i}" for i in range(len(self.hidden))] + ["output"]
        devices = _stage_devices(self.devices)
        placed = [(devices[s], keras.layers.Dense(w, activation=a, name=n))
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


def _stage_devices(n: int) -> list[str]:
    """The ``n`` devices a split model's stages go to, on the engine building it: the first
    device of each worker task when the engine is connected to a cluster of workers (a
    model-parallel chief: ``/job:worker/replica:0/task:i/device:CPU:0``, or its GPU), else
    this engine's logical CPU devices (``devices=N`` under ``single``)."""
    import tensorflow as tf

    found = [d.name for d in tf.config.list_logical_devices()]
    workers = [f"/job:worker/replica:0/task:{i}/device:" for i in range(n)]
    if any(name.startswith(workers[0]) for name in found):
        remote = []
        for i, prefix in enumerate(workers):
            mine = [name for name in found if name.startswith(prefix)]
            if not mine:
                raise ValueError(f"Invalid value for argument 'workers'. Received: a cluster without worker task {i}. "
                                 f"Expected {n} worker engines, one per stage of the model (split_mlp(devices={n})).")
            remote.append(next((m for m in mine if "/device:GPU:" in m), mine[0]))
        return remote
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(cpus) < n:
        raise ValueError(f"Invalid value for argument 'devices'. Received: {len(cpus)} CPU device(s) on the "
                         f"engine. Expected {n}: train with devices={n}.")
    return cpus[:n]


def split_mlp(hidden: int | Sequence[int] = (64, 32), classes: int = 10, devices: int = 2,
              stages: Sequence[int] | None = None) -> SplitMLP:
    """An MLP whose consecutive layers live on ``devices`` different devices (model
    parallelism). Train it with ``strategy="single", devices=N`` (logical devices of one
    engine) or ``strategy="model_parallel", workers=N`` (a worker engine per stage).
    ``stages``: the stage of each layer, hidden layers then the output, from 0 up by steps
    of 0 or 1 to ``devices - 1``: where to cut, e.g. ``split_mlp((512, 16), stages=(0, 0, 1))``
    cuts after the 16-wide layer, ``stages=(0, 1, 1)`` after the 512-wide one (None: the
    layers spread as evenly as they go)."""
    base = mlp(hidden, classes)
    layers = len(base.hidden) + 1
    if validate.positive_int("devices", devices) > layers:
        raise invalid("devices", devices, f"an int from 1 to {layers} (one stage per layer at most)")
    if stages is not None:
        given = tuple(stages) if isinstance(stages, (list, tuple)) else stages
        steps = [b - a for a, b in zip(given, given[1:])] if isinstance(given, tuple) else None
        if not (isinstance(given, tuple) and len(given) == layers
                and all(isinstance(s, int) and not isinstance(s, bool) for s in given)
                and given[0] == 0 and given[-1] == devices - 1 and all(d in (0, 1) for d in steps)):
            raise invalid("stages", stages, f"{layers} stage numbers, one per layer (hidden layers then the "
                          f"output), from 0 up by steps of 0 or 1 to devices - 1 = {devices - 1}")
        stages = given
    return SplitMLP(base.hidden, base.classes, devices, layer_stages=stages)


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
