"""Build what a run trains, on the engine: model, optimizer, loss, input pipeline; and check
that the data and the evaluation data fit the model before training."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from workbench.common.job import Job


def keras_model(model: Any) -> bool:
    import keras

    return isinstance(model, keras.Model)


def model(job: Job) -> Any:
    """The user's model (a keras.Model or a tf.Module) with every variable made, before the
    optimizer is built on them (the caller builds both under the strategy's scope). A Keras
    model not built yet (no ``Input``: ``wb.models.mlp()``, a ``Sequential`` of layers, a
    subclassed model) is built here as Keras' own ``fit`` builds one: called once on symbolic
    inputs shaped as the data's examples, which makes every layer's variables and runs no op.
    Left to the first traced step, its variables were made there, unknown to the optimizer
    ("Unknown variable ... This optimizer can only be called for the variables it was
    originally built with"); ``build(input_shape)`` made none for a subclassed model without
    a ``build`` of its own."""
    import tensorflow as tf

    from workbench.common.strategies import spec

    m = job.model()
    if not isinstance(m, tf.Module) and not keras_model(m):
        raise TypeError(
            f"Invalid value for argument 'model'. The callable returned {type(m).__name__}. "
            "Expected it to return a keras.Model or a tf.Module."
        )
    if keras_model(m) and not m.built:
        symbolic_call(m, inputs(job.data), "data")
    if keras_model(m) and job.variable_partitioner is not None and spec(job.strategy).shards_variables:
        raise TypeError(
            "Invalid value for argument 'variable_partitioner'. Received a Keras 3 model with "
            f"variable_partitioner={job.variable_partitioner!r}. Expected a tf.Module model "
            "(for example wb.models.module_mlp(...)): Keras 3 layers fail in tape.gradient with "
            "sharded variables ('ShardedVariable' object has no attribute 'handle')."
        )
    return m


def inputs(data: Any) -> Any:
    """What ``data`` feeds the model, as a ``tf.TensorSpec`` (or a structure of them) with an
    unknown batch size: its numpy examples, or the ``x`` of a ``dataset_fn``'s (x, y)."""
    import tensorflow as tf

    if callable(data):
        return dataset(data, "data").element_spec[0]
    return tf.TensorSpec((None,) + tuple(data.input_shape), tf.as_dtype(data.x_train.dtype))


def symbolic_call(m: Any, spec: Any, name: str) -> None:
    """Call the Keras model ``m`` on symbolic inputs of ``spec`` (``keras.KerasTensor``: no op
    runs), as Keras' ``fit`` builds a model; a model that cannot take them is an error naming
    the argument the examples came from (``name``)."""
    import keras
    import tensorflow as tf

    x = tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, s.dtype.name), spec)
    try:
        m(x, training=False)
    except Exception as e:
        raise ValueError(
            f"Invalid value for argument '{name}'. Received: examples of shape {_shapes(spec)}. Expected "
            f"examples the model accepts; calling it on them failed: {_reason(e)}") from None


def _shapes(spec):
    """One example's shape (the batch's without its first axis), or a list of them."""
    import tensorflow as tf

    shapes = [tuple(s.shape)[1:] for s in tf.nest.flatten(spec)]
    return shapes[0] if len(shapes) == 1 else shapes


def _reason(e):
    """An exception in one line: Keras' "Exception encountered when calling X.call()." header
    and its list of the call's arguments left out for the lines that say what failed."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split("Arguments received by")[0]
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("Exception encountered when calling")]
    return f"{type(e).__name__}: {' '.join(lines)}"


def dataset(fn: Callable, name: str) -> tf.data.Dataset:
    """The dataset a ``dataset_fn`` (argument ``name``: ``data`` or ``eval_data``) makes for one
    input pipeline, called eagerly (as written), checked to be a ``tf.data.Dataset`` of
    ``(x, y)`` elements."""
    import tensorflow as tf

    ds = fn(tf.distribute.InputContext())
    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(f"Invalid value for argument '{name}'. Received: a dataset_fn that returned "
                        f"{type(ds).__name__}. Expected a tf.data.Dataset of (x, y) batches.")
    if not (isinstance(ds.element_spec, tuple) and len(ds.element_spec) == 2):
        raise ValueError(f"Invalid value for argument '{name}'. Received: a dataset_fn whose dataset yields "
                         f"{ds.element_spec}. Expected (x, y) batches.")
    return ds


def eval_dataset(fn: Callable) -> tf.data.Dataset:
    """An ``eval_data`` dataset_fn's dataset, checked: finite, since evaluation reads it to its end."""
    import tensorflow as tf

    ds = dataset(fn, "eval_data")
    if int(ds.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
        raise ValueError("Invalid value for argument 'eval_data'. Received: a dataset_fn whose dataset "
                         "repeats forever. Expected a finite dataset of (x, y) batches (no repeat()): "
                         "evaluation reads it to its end.")
    return ds


def check_fit(m: Any, job: Job, loss_fn: Callable) -> None:
    """Fail before training when the data or the evaluation data does not fit the model or
    the loss: a clear error naming the argument (``data``, ``eval_data``), not a shape error
    deep inside a traced function or after training, nor a silent mismatch of class counts.
    An ``eval_data`` dataset_fn is checked here too (its dataset finite, and, for a Keras
    model, its examples' shape, symbolically); a training ``dataset_fn`` built the model
    already when it needed building."""
    for name, data in (("data", job.data), ("eval_data", job.eval_data)):
        if callable(data):
            if name == "eval_data":
                spec = eval_dataset(data).element_spec[0]
                if keras_model(m):
                    symbolic_call(m, spec, name)
        elif data is not None:
            _check_examples(m, job, loss_fn, name, data)


def _check_examples(m, job, loss_fn, name, data):
    """Two of ``data``'s examples through the model (and, for the training data, the loss)."""
    x, y = (data.x_train, data.y_train) if name == "data" or not len(data.x_test) else (data.x_test, data.y_test)
    x, y = x[:2], y[:2]
    try:
        pred = m(x, training=False) if keras_model(m) else m(x)
    except Exception as e:
        raise ValueError(
            f"Invalid value for argument '{name}'. Received: examples of shape {tuple(x.shape[1:])}. "
            f"Expected examples the model accepts; calling it on two of them failed: {_reason(e)}"
        ) from None
    from workbench.engine.keras_metrics import accuracy_kind

    sparse = job.loss_name == "sparse_categorical_crossentropy" or accuracy_kind(y, pred) == "sparse"
    if job.classifies and sparse and pred.shape[-1] < data.classes:
        raise ValueError(
            f"Invalid value for argument '{name}'. Received: labels 0..{data.classes - 1} ({data.classes} classes). "
            f"Expected at most the {pred.shape[-1]} classes the model outputs."
        )
    if name != "data":
        return
    try:
        values = loss_fn(y, pred)
    except Exception as e:
        if "Invalid value for argument 'loss'" in str(e):
            raise
        raise ValueError(
            f"Invalid value for argument 'loss'. Received: loss={_name(job.loss)!r} on labels of shape "
            f"{tuple(y.shape)} and the model's output of shape {tuple(pred.shape)}. Expected a loss that "
            f"takes them (for integer class labels: 'sparse_categorical_crossentropy'); it failed: "
            f"{type(e).__name__}: {str(e).splitlines()[0]}"
        ) from None
    if tuple(values.shape) != (2,):
        raise ValueError(
            f"Invalid value for argument 'loss'. Received: a loss ({_name(job.loss)}) that returns shape "
            f"{tuple(values.shape)} for 2 examples. Expected one value per example: shape (2,)."
        )


def users(fn: Callable) -> Callable:
    """``fn``, a user's function, converted by AutoGraph where it is called from a traced
    function: Python control flow on tensors in it works (``if loss > 100:``).

    The workbench's own step and loop code is traced unconverted, as TensorFlow's and
    Keras' own code is (AutoGraph leaves their modules alone); converting it took 0.55 s
    of a parameter-server chief's first trace (its replica step, the helpers that step
    calls, the dataset function's wrappers), on the way to the run's first step. What the
    user wrote is converted as it was before: the loss, a ``tf.Module`` model's
    ``__call__`` and a ``dataset_fn`` (whose ``Dataset.map`` functions tf.data then converts
    too). This is how TensorFlow's own higher-order functions (``strategy.run``,
    ``Dataset.map``) treat the functions users hand them (``tf_convert``). A Keras model's
    ``call`` and Keras losses and metrics are Keras code, converted neither before nor now.
    Called eagerly (a ``dataset_fn`` under MWMS, the loss in ``check_fit``), ``fn`` runs as
    written, as before: converted code would send a ``for`` over a dataset to tf.data's
    traced loop even there."""
    import tensorflow as tf
    from tensorflow.python.autograph.core import ag_ctx

    converted = tf.__internal__.autograph.tf_convert(fn, ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED))

    def call(*args, **kwargs):
        return converted(*args, **kwargs) if tf.inside_function() else fn(*args, **kwargs)

    return call


def call(m: Any, x: tf.Tensor) -> tf.Tensor:
    return m(x, training=True) if keras_model(m) else users(m.__call__)(x)


def trainable(m: Any) -> list[tf.Variable]:
    return m.trainable_variables


def optimizer(job: Job) -> Any:
    """The run's optimizer, built on the engine (under the strategy's scope, by the caller):
    from its name, the user's callable, or the class and config of the Keras optimizer the
    user passed (its clipping, weight decay and learning-rate schedule included)."""
    import keras

    from workbench.common.job import FromConfig

    if isinstance(job.optimizer, FromConfig):
        return job.optimizer.build()
    if callable(job.optimizer):
        return job.optimizer()
    rate = job.learning_rate
    rate = 0.1 if rate is None else rate.keras() if hasattr(rate, "keras") else rate
    if job.optimizer == "sgd":
        return keras.optimizers.SGD(rate, momentum=job.momentum)
    cls = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop,
           "adagrad": keras.optimizers.Adagrad}[job.optimizer]
    return cls(rate)


def aggregated_clipping(opt: Any, replicas: int, summed: bool = False) -> Callable[[list], list] | None:
    """Keras 3 clips each replica's own gradient before it sums them across replicas, so a
    clipped run on n replicas is not the same training as on one. With ``replicas`` > 1
    this takes the clipping over: it returns ``clip(grads)``, which sums the gradients
    across replicas (one all-reduce, as Keras' own) and clips the sum, the global batch's
    gradient, as one process would; the optimizer then neither clips nor sums again.
    Returns None when there is nothing to take over (no clipping, or one replica).
    ``summed=True``: the step sums the gradients itself before (``compression.reducer``);
    ``clip`` only clips."""
    import tensorflow as tf

    clipnorm, global_clipnorm, clipvalue = opt.clipnorm, opt.global_clipnorm, opt.clipvalue
    if replicas <= 1 or not (clipnorm or global_clipnorm or clipvalue):
        return None
    opt.clipnorm = opt.global_clipnorm = opt.clipvalue = None
    opt._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)  # summed below

    def clip(grads):
        if not summed:
            grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
        if clipnorm:
            return [tf.clip_by_norm(g, clipnorm) for g in grads]
        if global_clipnorm:
            return tf.clip_by_global_norm(grads, global_clipnorm)[0]
        return [tf.clip_by_value(g, -clipvalue, clipvalue) for g in grads]

    return clip


def extra_losses(m: Any) -> tf.Tensor | None:
    """The model's own losses (weight and activity regularizers, ``add_loss``) from its last
    call, summed, or None. A tf.Module has none."""
    import tensorflow as tf

    losses = getattr(m, "losses", None) if keras_model(m) else None
    if not losses:
        return None
    return tf.add_n([tf.cast(tf.reduce_sum(x), tf.float32) for x in losses])


def loss(job: Job) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """Per-example loss function ``f(y_true, y_pred) -> [batch]``.

    A name or a ``keras.losses.Loss`` with any reduction: the workbench takes its
    per-example values (reduction off, on this engine's copy) and always averages them over
    the global batch itself. Values with more axes than the batch (a loss per time step,
    say) are averaged over those axes first, as Keras' default reduction does."""
    import keras
    import tensorflow as tf

    fn = job.loss
    if isinstance(fn, str):
        # its Loss class, as compile() uses it: labels of shape (batch,) fit outputs (batch, 1)
        # (its ``call``: Loss.__call__ would also cast to float32, and float64 models stay float64)
        cls = getattr(keras.losses, "".join(w.capitalize() for w in fn.split("_")), None)
        fn = cls().call if isinstance(cls, type) and issubclass(cls, keras.losses.Loss) else keras.losses.get(fn)
    elif isinstance(fn, keras.losses.Loss):
        fn.reduction = None  # this engine's copy: per-example values
    # a Keras Loss stays unconverted (Keras code), unless the user's subclass overrides __call__
    fn = users(fn)

    def per_example(y_true, y_pred):
        values = tf.convert_to_tensor(fn(y_true, y_pred))
        if values.shape.rank == 0:
            raise ValueError(
                f"Invalid value for argument 'loss'. Received: a loss ({_name(job.loss)}) that returns one "
                "number for the whole batch. Expected per-example values of shape (batch,): return them "
                "unreduced (a keras.losses.Loss of any reduction works as it is)")
        if values.shape.rank > 1:
            values = tf.reduce_mean(values, axis=list(range(1, values.shape.rank)))
        return values

    return per_example


def _name(value):
    return value if isinstance(value, str) else getattr(value, "__name__", type(value).__name__)


def eval_batches(job: Job, batch_size: int = 1024) -> Iterator[tuple[np.ndarray, np.ndarray]] | None:
    """The evaluation data as ``(x, y)`` numpy batches: ``eval_data`` when the run has it
    (its test split, or all of it when it has none; a ``dataset_fn``'s dataset read to its
    end), else the test split of the training data; None when there is neither."""
    import numpy as np

    data = job.data if job.eval_data is None else job.eval_data
    if callable(data):
        if job.eval_data is None:
            return None
        return ((np.asarray(x), np.asarray(y)) for x, y in eval_dataset(data))
    x, y = data.x_test, data.y_test
    if not len(x) and job.eval_data is not None:
        x, y = data.x_train, data.y_train
    if not len(x):
        return None
    return ((x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size))


def dataset_fn(job: Job, start_step: int = 0, worker_index: Callable | None = None,
               num_workers: int = 1) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """``fn(input_context) -> tf.data.Dataset`` of per-replica batches.

    For numpy data every pipeline builds the same seeded, shuffled, repeated stream of
    examples, then keeps every n-th element (its shard) and batches it. So no example is
    read twice per epoch across pipelines, and global batch s is exactly the s-th block of
    ``global_batch_size`` elements of the stream: the same examples a single process sees
    with the same seed. ``start_step`` skips what a resumed run already trained on.
    ``worker_index`` (a tensor under ParameterServerStrategy) overrides the pipeline id.

    Every dataset, a user's ``dataset_fn``'s included, runs without tf.data's autotuning
    model thread (``autotune.enabled = False``; prefetch buffers still size themselves).
    Deleting an iterator waits for that thread, which sleeps through its optimisation
    period without waking (TF 2.21): after long parameter-server runs the next run's
    start, or a run's end, waited seconds with no process using CPU (bench/README.md).
    """
    make = _user_or_own(job, worker_index, num_workers, start_step)

    def fn(input_context):
        import tensorflow as tf

        ds = make(input_context)
        if not isinstance(ds, tf.data.Dataset):
            raise TypeError(f"data: the dataset_fn returned {type(ds).__name__}; expected a tf.data.Dataset")
        options = tf.data.Options()
        options.autotune.enabled = False
        return ds.with_options(options)

    return fn


def _user_or_own(job, worker_index, num_workers, start_step):
    if callable(job.data):
        return users(job.data)

    data = job.data

    def fn(input_context):
        import tensorflow as tf

        per_replica = input_context.get_per_replica_batch_size(job.global_batch_size)
        shards = input_context.num_input_pipelines if worker_index is None else num_workers
        index = input_context.input_pipeline_id if worker_index is None else worker_index()
        ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
        ds = ds.shuffle(len(data.x_train), seed=job.seed, reshuffle_each_iteration=True).repeat()
        ds = ds.shard(shards, index)
        per_pipeline = per_replica * input_context.num_replicas_in_sync // input_context.num_input_pipelines
        if start_step:
            ds = ds.skip(start_step * per_pipeline)
        return ds.batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    return fn
