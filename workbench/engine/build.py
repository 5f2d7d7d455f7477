"""Build what a run trains, on the engine: model, optimizer, loss, input pipeline."""

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
    """The user's model (a keras.Model, built when the data says its input shape, or a tf.Module)."""
    import tensorflow as tf

    from workbench.common.strategies import spec

    m = job.model()
    if not isinstance(m, tf.Module) and not keras_model(m):
        raise TypeError(
            f"Invalid value for argument 'model'. The callable returned {type(m).__name__}. "
            "Expected it to return a keras.Model or a tf.Module."
        )
    if keras_model(m) and not m.built and hasattr(job.data, "input_shape"):
        m.build((None,) + tuple(job.data.input_shape))
    if keras_model(m) and job.variable_partitioner is not None and spec(job.strategy).shards_variables:
        raise TypeError(
            "Invalid value for argument 'variable_partitioner'. Received a Keras 3 model with "
            f"variable_partitioner={job.variable_partitioner!r}. Expected a tf.Module model "
            "(for example wb.models.module_mlp(...)): Keras 3 layers fail in tape.gradient with "
            "sharded variables ('ShardedVariable' object has no attribute 'handle')."
        )
    return m


def check_fit(m: Any, job: Job, loss_fn: Callable) -> None:
    """Fail before training when the data does not fit the model or the loss: a clear error,
    not a shape error deep inside a traced function, nor a silent mismatch of class counts."""
    data = job.data
    if callable(data):
        return
    try:
        pred = m(data.x_train[:2], training=False) if keras_model(m) else m(data.x_train[:2])
    except Exception as e:
        raise ValueError(
            f"Invalid value for argument 'data'. Received: examples of shape {data.input_shape}. "
            f"Expected examples the model accepts; calling it on two of them failed: "
            f"{type(e).__name__}: {str(e).splitlines()[0]}"
        ) from None
    if job.classifies and pred.shape[-1] < data.classes:
        raise ValueError(
            f"Invalid value for argument 'data'. Received: labels 0..{data.classes - 1} ({data.classes} classes). "
            f"Expected at most the {pred.shape[-1]} classes the model outputs."
        )
    y = data.y_train[:2]
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


def eval_batches(job: Job, batch_size: int = 1024) -> Iterator[tuple[np.ndarray, np.ndarray]] | None:
    """The evaluation data as ``(x, y)`` numpy batches: ``eval_data`` when the run has it
    (its test split, or all of it when it has none; a ``dataset_fn``'s dataset read to its
    end), else the test split of the training data; None when there is neither."""
    import numpy as np

    data = job.data if job.eval_data is None else job.eval_data
    if callable(data):
        if job.eval_data is None:
            return None
        import tensorflow as tf

        ds = data(tf.distribute.InputContext())
        if not isinstance(ds, tf.data.Dataset):
            raise TypeError(f"Invalid value for argument 'eval_data'. Received: a dataset_fn that returned "
                            f"{type(ds).__name__}. Expected a tf.data.Dataset of (x, y) batches.")
        if int(ds.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
            raise ValueError("Invalid value for argument 'eval_data'. Received: a dataset_fn whose dataset "
                             "repeats forever. Expected a finite dataset of (x, y) batches (no repeat()): "
                             "evaluation reads it to its end.")
        return ((np.asarray(x), np.asarray(y)) for x, y in ds)
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
