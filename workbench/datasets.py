"""Data for training runs, prepared in the kernel as numpy arrays (no TensorFlow).

Nothing here downloads: ``digits`` is bundled with scikit-learn, ``synthetic`` is made
from a seed, ``mnist`` reads a local ``mnist.npz`` in the Keras format. A
``dataset_fn(input_context) -> tf.data.Dataset`` is also accepted by ``Cluster.train``.
"""

from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from workbench.common import validate
from workbench.errors import invalid


@dataclass(frozen=True, eq=False)
class Data:
    """Train and test arrays: features are float32 rows, labels int32 class indices."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def classes(self) -> int:
        return int(max([int(y.max()) for y in (self.y_train, self.y_test) if len(y)] or [0])) + 1

    def __repr__(self) -> str:
        return (f"<Data {self.name!r}: {len(self.x_train)} train / {len(self.x_test)} test, "
                f"input shape {self.input_shape}, {self.classes} classes>")


def _split(name, x, y, test_fraction, seed):
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Data(name, x[train], y[train], x[test], y[test])


def digits(test_fraction: float = 0.2, seed: int = 0) -> Data:
    """scikit-learn's handwritten digits: 1,797 8x8 images, 10 classes, scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype("float32")
    return _split("digits", x, d.target.astype("int32"), test_fraction, seed)


def synthetic(examples: int = 8192, features: int = 784, classes: int = 10, noise: float = 0.5,
              test_fraction: float = 0.2, seed: int = 0) -> Data:
    """A learnable classification problem: labels from a random linear teacher plus noise."""
    for name, value, low in (("examples", examples, 2), ("features", features, 1), ("classes", classes, 2)):
        validate.positive_int(name, value, minimum=low)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((examples, features), dtype=np.float32)
    teacher = rng.standard_normal((features, classes), dtype=np.float32) / np.sqrt(features)
    logits = x @ teacher + noise * rng.standard_normal((examples, classes), dtype=np.float32)
    return _split("synthetic", x, logits.argmax(1).astype("int32"), test_fraction, seed)


def mnist(path: str | PathLike) -> Data:
    """MNIST from a local ``mnist.npz`` in Keras' format (keys x_train, y_train, x_test, y_test).

    This machine has no internet: the file must already be there; nothing is downloaded.
    """
    path = Path(path)
    if not path.is_file():
        raise invalid("path", str(path), "an existing mnist.npz file (nothing is downloaded)")
    with np.load(path) as f:
        missing = {"x_train", "y_train", "x_test", "y_test"} - set(f.files)
        if missing:
            raise invalid("path", str(path), f"an .npz with x_train, y_train, x_test, y_test (missing {sorted(missing)})")
        def prep(x):
            return (x.reshape(len(x), -1) / 255.0).astype("float32")
        return Data("mnist", prep(f["x_train"]), f["y_train"].astype("int32"),
                    prep(f["x_test"]), f["y_test"].astype("int32"))


def from_numpy(x: ArrayLike, y: ArrayLike, x_test: ArrayLike | None = None, y_test: ArrayLike | None = None,
               name: str = "numpy", test_fraction: float = 0.2, seed: int = 0, *, argument: str | None = None) -> Data:
    """Wrap arrays; without a test set, ``test_fraction`` of them is held out. ``argument``: the
    ``Cluster.train`` argument the arrays came in (``data``, ``eval_data``), which an error
    then names instead of ``x`` or ``y``."""
    def refused(part, received, expected):
        return invalid(part, received, expected) if argument is None else invalid(argument, f"{part}: {received}", expected)

    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim < 2 or len(x) == 0:
        raise refused("x", f"array of shape {x.shape}", "a non-empty array of shape (examples, features...)")
    if y.shape[:1] != x.shape[:1]:
        raise refused("y", f"array of shape {y.shape}", f"one label per example: shape ({len(x)},)")
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        sample = ", ".join(repr(v) for v in np.unique(y.ravel())[:3].tolist())
        raise refused("y", f"labels of dtype {y.dtype} ({sample}, ...)",
                      "numbers: integer class indices 0..k-1 (or float targets). Map other labels to indices "
                      "first, for example: classes, y = np.unique(y, return_inverse=True)")
    x = x.astype("float32")
    bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
    if bad:
        raise refused("x", f"an array with {bad} NaN or infinite values", "finite numbers (a NaN input makes the loss NaN)")
    y = y.astype("int32") if np.issubdtype(y.dtype, np.integer) else y.astype("float32")
    if x_test is None:
        return _split(name, x, y, test_fraction, seed)
    return Data(name, x, y, np.asarray(x_test, "float32"), np.asarray(y_test).astype(y.dtype))
