"""``Cluster.train``'s arguments: checked in the kernel, turned into a ``Job``.

``available`` is the number of engines the run may use, or None where no cluster is
running yet (the CLI checks its arguments before starting one).
"""

import time
import uuid
from collections.abc import Callable

import numpy as np

from workbench.common import strategies, validate
from workbench.common.job import Job
from workbench.common.options import COMPRESSION, complete
from workbench.datasets import Data
from workbench.errors import invalid
from workbench.kernel.launchers import home
from workbench.kernel.runs import keras_args


def make_job(available: int | None, *, model: Callable, data: object, run_dir: str | None = None,
             **options: object) -> Job:
    """The checked ``Job`` of a run: ``options`` are the Job options of ``Cluster.train``
    (``workbench.common.options``); those left out take their declared defaults."""
    return _make_job(available, model=model, data=data, run_dir=run_dir, **complete(options))


def _make_job(available, *, model, data, run_dir, loss, optimizer, learning_rate, momentum, strategy, workers,
              ps, global_batch_size, steps, seed, steps_per_execution, checkpoint_every, eval_every,
              variable_partitioner, devices, average_every, metrics, eval_data, compression, bytes_per_pack, gradient_delay,
              anatomy, logs):
    strategy = validate.choice("strategy", strategy, strategies.names())
    spec = strategies.spec(strategy)
    if workers is None and spec.splits_model and isinstance(getattr(model, "devices", None), int):
        workers = model.devices  # a worker per stage of the split model
    workers, ps = spec.with_defaults(workers, ps)
    validate.topology(spec, workers, ps, available=available)
    model = keras_args.model(model)
    data = _data(data)
    eval_data = None if eval_data is None else _data(eval_data, "eval_data", held_out=True)
    if isinstance(data, Data) and isinstance(eval_data, Data):
        _evaluable(data, eval_data)
    loss, loss_name = keras_args.loss(loss)
    momentum = validate.fraction("momentum", momentum)
    optimizer, learning_rate = keras_args.optimizer(optimizer, learning_rate, momentum)
    metrics, accuracy = keras_args.metrics(metrics)
    global_batch_size = validate.positive_int("global_batch_size", global_batch_size)
    steps = validate.positive_int("steps", steps)
    if seed is not None:
        validate.positive_int("seed", seed, minimum=0)
    devices = validate.positive_int("devices", devices, minimum=0)
    if devices and not spec.logical_devices:
        raise invalid("devices", devices, f"0 with strategy={strategy!r} (logical devices are for "
                      f"{_listed('logical_devices')})")
    _stages_fit(model, spec, workers, devices)
    if average_every is not None and not spec.averages:
        raise invalid("average_every", average_every,
                      f"None with strategy={strategy!r} (only {_listed('averages')} averages replicas)")
    average_every = validate.positive_int("average_every", 1 if average_every is None else average_every)
    if compression is not None:
        if not spec.compressible:
            raise invalid("compression", compression,
                          f"None with strategy={strategy!r} (only {_listed('compressible')} run an all-reduce to compress)")
        compression = validate.choice("compression", compression, COMPRESSION)
    bytes_per_pack = validate.positive_int("bytes_per_pack", bytes_per_pack, minimum=0)
    if bytes_per_pack and not spec.compressible:
        raise invalid("bytes_per_pack", bytes_per_pack,
                      f"0 with strategy={strategy!r} (only {_listed('compressible')} run an all-reduce to pack)")
    if bytes_per_pack and compression == "int8":
        raise invalid("bytes_per_pack", bytes_per_pack, "0 with compression='int8' (its 8-bit values are "
                      "gathered as one tensor, not all-reduced in packs)")
    gradient_delay = validate.positive_int("gradient_delay", gradient_delay, minimum=0)
    if gradient_delay and not spec.delays_gradients:
        raise invalid("gradient_delay", gradient_delay,
                      f"0 with strategy={strategy!r} (a delay emulates asynchronous staleness in one process: "
                      f"{_listed('delays_gradients')}; a parameter_server run's own staleness is in run.history)")
    for name, value in (("anatomy", anatomy), ("logs", logs)):
        if not isinstance(value, bool):
            raise invalid(name, value, "True or False")
    sync = spec.synchronous
    replicas = spec.replicas(workers, devices)
    if global_batch_size % replicas:
        raise invalid("global_batch_size", global_batch_size,
                      f"a multiple of the {replicas} replicas of strategy={strategy!r}, so every replica gets "
                      f"the same batch (for example {max(replicas, global_batch_size // replicas * replicas)})")
    if isinstance(data, Data):
        shards = spec.shards(workers)
        per_shard = len(data.x_train) // shards
        per_batch = global_batch_size // shards if sync else global_batch_size
        if per_shard < per_batch:
            raise invalid("global_batch_size", global_batch_size,
                          f"at most the {len(data.x_train)} training examples of data {data.name!r} "
                          f"split over {shards} shard(s): each shard has {per_shard} examples, one batch needs {per_batch}")
    if steps_per_execution is None:
        # several steps per tf.function call (per scheduled function under PS): the Python
        # round trip per call costs as much as a small model's step; metrics stay per step
        steps_per_execution = spec.default_steps_per_execution(steps)
    steps_per_execution = validate.positive_int("steps_per_execution", steps_per_execution)
    checkpoint_every = validate.positive_int("checkpoint_every", checkpoint_every, minimum=0)
    eval_every = validate.positive_int("eval_every", eval_every, minimum=0)
    if variable_partitioner is not None:
        if not spec.shards_variables:
            raise invalid("variable_partitioner", variable_partitioner,
                          f"None with strategy={strategy!r} (only {_listed('shards_variables', quote=False)} "
                          "shards variables)")
        ok = (isinstance(variable_partitioner, int) and not isinstance(variable_partitioner, bool)
              and 1 <= variable_partitioner) or (
            isinstance(variable_partitioner, tuple) and len(variable_partitioner) == 2
            and variable_partitioner[0] == "min_size" and isinstance(variable_partitioner[1], int))
        if not ok:
            raise invalid("variable_partitioner", variable_partitioner,
                          "None, a number of shards (int >= 1), or ('min_size', bytes)")
        from workbench import models  # the workbench's Keras models, known before any engine builds one

        if isinstance(model, (models.MLP, models.SplitMLP, models.Rebuilt)):
            raise invalid("variable_partitioner", variable_partitioner,
                          f"None with a Keras model (model={type(model).__name__}), or a tf.Module model such as "
                          "wb.models.module_mlp(...)", "Keras 3 layers fail in tape.gradient with sharded variables.")
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    run_dir = run_dir or str(home.runs_dir() / run_id)
    return Job(
        run_id=run_id, run_dir=run_dir, strategy=strategy, model=model, data=data, loss=loss,
        optimizer=optimizer, learning_rate=learning_rate, momentum=momentum,
        global_batch_size=global_batch_size, steps=steps, seed=0 if seed is None else int(seed),
        workers=workers, ps=ps, steps_per_execution=steps_per_execution,
        checkpoint_every=checkpoint_every, eval_every=eval_every,
        stop_check_every=max(steps_per_execution, 10), variable_partitioner=variable_partitioner,
        devices=devices, average_every=average_every, metrics=metrics, accuracy=accuracy, eval_data=eval_data,
        loss_name=loss_name,
        compression=compression, bytes_per_pack=bytes_per_pack, gradient_delay=gradient_delay, anatomy=anatomy,
        logs=logs,
    )


def _stages_fit(model, spec, workers, devices):
    """A split model's stages need a device each: a worker engine each under a strategy that
    splits the model across its workers (which trains nothing else), or a logical device
    each of one engine."""
    from workbench.models import SplitMLP

    split = isinstance(model, SplitMLP)
    if spec.splits_model:
        if not split:
            raise invalid("model", model, f"wb.models.split_mlp(..., devices={workers}) with strategy="
                          f"{spec.name!r}: its stages, one per worker engine, are what the workers hold")
        if model.devices != workers:
            raise invalid("workers", workers, f"workers={model.devices}: one worker engine per stage of the model "
                          f"(split_mlp(devices={model.devices}))")
    elif split and not spec.logical_devices:
        raise invalid("model", model, f"a model that is not split with strategy={spec.name!r} (train "
                      f"split_mlp with {_listed('splits_model')}, or on logical devices with {_listed('logical_devices')})")
    elif split and model.devices > 1 and devices < model.devices:
        raise invalid("devices", devices, f"at least {model.devices}: a logical device per stage of "
                      f"split_mlp(devices={model.devices})")


def _listed(flag, quote=True):
    """The strategies whose spec has ``flag``, for a message: "'mirrored' and 'single'"."""
    names = [repr(n) if quote else n for n in strategies.with_flag(flag)]
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def _evaluable(data, eval_data):
    """Evaluation feeds the model what training does: ``eval_data``'s examples must have the
    shape of ``data``'s (whether the model takes them is checked on the engines, before
    training, where the model is)."""
    if eval_data.input_shape != data.input_shape:
        raise invalid("eval_data", f"examples of shape {eval_data.input_shape}",
                      f"examples of the shape data has, which the model trains on: {data.input_shape}")


def _data(data, name="data", held_out=False):
    """``data`` (or ``eval_data``, whose numpy arrays are all held out for evaluation) as a
    ``Data`` or a dataset_fn."""
    if isinstance(data, Data):
        if len(data.x_train) == 0 and not held_out:
            raise invalid(name, data, "training data with at least one example")
        return data
    if isinstance(data, tuple) and len(data) in (2, 4):
        from workbench import datasets

        try:
            arrays = [np.asarray(a) for a in data]
        except Exception as e:
            raise invalid(name, type(data).__name__, f"numpy-convertible arrays ({e})") from e
        if any(a.dtype == object for a in arrays):
            raise invalid(name, "arrays of dtype object", "numeric arrays (x, y)")
        if held_out and len(arrays) == 2:
            return datasets.from_numpy(*arrays, name="eval_data", test_fraction=1.0, argument=name)
        return datasets.from_numpy(*arrays, argument=name)
    if callable(data):
        return data
    raise invalid(name, type(data).__name__,
                  "wb.datasets.digits() (or another wb.datasets Data), numpy (x, y), "
                  "or a dataset_fn(input_context) -> tf.data.Dataset")
