"""Every model the workbench ships trains on every kind of data (numpy arrays, a ``Data``, a
``dataset_fn``) under every strategy, and so do a user's Keras models without an ``Input``:
each combination is one short run (its trace and a few steps) on one shared cluster, the
runs ordered by strategy so that engines are recycled only when the strategy changes."""

import math

import ipyparallel as ipp
import numpy as np
import pytest

import workbench as wb

pytestmark = pytest.mark.cluster

FEATURES = 16
DATA = wb.datasets.synthetic(examples=512, features=FEATURES, seed=3)
ARRAYS = (DATA.x_train, DATA.y_train)
STEPS = 4
TOPOLOGY = {  # every strategy, on at most the cluster's 3 engines
    "single": dict(strategy="single"),
    "mirrored": dict(strategy="mirrored", devices=2),
    "multi_worker_mirrored": dict(strategy="multi_worker_mirrored", workers=2),
    "parameter_averaging": dict(strategy="parameter_averaging", workers=2),
    "parameter_server": dict(strategy="parameter_server", workers=1, ps=1),
}


def slices(x, y):
    """A dataset_fn of the arrays, sharded and batched as tf.distribute's guides write one."""
    def dataset_fn(input_context):
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.batch(input_context.get_per_replica_batch_size(32))

    return dataset_fn


def generator(x, y):
    """A dataset_fn reading a Python generator (not under parameter_server: TensorFlow runs a
    generator in the process that made it, and there that is the chief, not the worker)."""
    def dataset_fn(input_context):
        import tensorflow as tf

        spec = (tf.TensorSpec((FEATURES,), tf.float32), tf.TensorSpec((), tf.int32))
        ds = tf.data.Dataset.from_generator(lambda: zip(x, y), output_signature=spec).repeat()
        return ds.batch(input_context.get_per_replica_batch_size(32))

    return dataset_fn


DATA_KINDS = {"numpy": ARRAYS, "Data": DATA, "dataset_fn": slices(*ARRAYS), "generator": generator(*ARRAYS)}


@ipp.interactive
def sequential_without_input():
    import keras

    return keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10, activation="softmax")])


@ipp.interactive
def subclassed_without_build():
    """A subclassed model with no ``build`` of its own: ``build(input_shape)`` makes none of
    its variables; Keras builds it by calling it."""
    import keras

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(16, activation="relu")
            self.out = keras.layers.Dense(10, activation="softmax")

        def call(self, x):
            return self.out(self.hidden(x))

    return Net()


MODELS = {
    "mlp": wb.models.mlp((16,)),
    "module_mlp": wb.models.module_mlp(FEATURES, (16,)),
    "split_mlp": wb.models.split_mlp((16,), devices=2),
    "sequential_without_input": sequential_without_input,
    "subclassed_without_build": subclassed_without_build,
}


def combinations():
    """(strategy, model, data kind): the shipped models under every strategy on every kind
    of data; split_mlp on the devices it splits over (single, devices=2); users' models and
    a generator under single and multi_worker_mirrored."""
    for strategy in TOPOLOGY:
        for model in ("mlp", "module_mlp"):
            for kind in ("numpy", "Data", "dataset_fn"):
                yield strategy, model, kind
        if strategy in ("single", "multi_worker_mirrored"):
            yield strategy, "mlp", "generator"
            for model in ("sequential_without_input", "subclassed_without_build"):
                for kind in ("numpy", "dataset_fn"):
                    yield strategy, model, kind
        if strategy == "single":
            for kind in ("numpy", "Data", "dataset_fn"):
                yield strategy, "split_mlp", kind


@pytest.mark.parametrize("strategy,model,kind", list(combinations()))
def test_a_model_trains_on_a_kind_of_data_under_a_strategy(cluster, strategy, model, kind):
    topology = dict(TOPOLOGY[strategy], devices=2) if model == "split_mlp" else TOPOLOGY[strategy]
    run = cluster.train(MODELS[model], DATA_KINDS[kind], global_batch_size=32, steps=STEPS, checkpoint_every=0,
                        **topology)
    run.wait(timeout=180)
    assert run.final_step == STEPS
    assert all(math.isfinite(v) for v in run.history.loss)
    assert len(run.weights()) == 4  # two kernels, two biases
    if kind in ("numpy", "Data"):  # their test split is evaluated at the end
        assert np.isfinite(run.evaluation["test_loss"]) and 0 <= run.evaluation["test_accuracy"] <= 1
