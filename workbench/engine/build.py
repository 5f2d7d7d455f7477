"""Build what a run trains, on the engine: model, optimizer, loss, input pipeline."""


def keras_model(model):
    import keras

    return isinstance(model, keras.Model)


def model(job):
    import tensorflow as tf

    m = job.model()
    if not isinstance(m, tf.Module) and not keras_model(m):
        raise TypeError(
            f"Invalid value for argument 'model'. The callable returned {type(m).__name__}. "
            "Expected it to return a keras.Model or a tf.Module."
        )
    if keras_model(m) and not m.built and hasattr(job.data, "input_shape"):
        m.build((None,) + tuple(job.data.input_shape))
    if keras_model(m) and job.variable_partitioner is not None and job.strategy == "parameter_server":
        raise TypeError(
            "Invalid value for argument 'variable_partitioner'. Received a Keras 3 model with "
            f"variable_partitioner={job.variable_partitioner!r}. Expected a tf.Module model "
            "(for example wb.models.module_mlp(...)): Keras 3 layers fail in tape.gradient with "
            "sharded variables ('ShardedVariable' object has no attribute 'handle')."
        )
    return m


def check_fit(m, job):
    """Fail before training when the data does not fit the model: a clear error, not a
    shape error deep inside a traced function, nor a silent mismatch of class counts."""
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
    if job.loss == "sparse_categorical_crossentropy" and pred.shape[-1] < data.classes:
        raise ValueError(
            f"Invalid value for argument 'data'. Received: labels 0..{data.classes - 1} ({data.classes} classes). "
            f"Expected at most the {pred.shape[-1]} classes the model outputs."
        )


def call(m, x):
    return m(x, training=True) if keras_model(m) else m(x)


def trainable(m):
    return m.trainable_variables


def optimizer(job):
    import keras

    if callable(job.optimizer):
        return job.optimizer()
    rate = job.learning_rate.keras() if hasattr(job.learning_rate, "keras") else job.learning_rate
    if job.optimizer == "sgd":
        return keras.optimizers.SGD(rate, momentum=job.momentum)
    cls = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop,
           "adagrad": keras.optimizers.Adagrad}[job.optimizer]
    return cls(rate)


def loss(job):
    """Per-example loss function ``f(y_true, y_pred) -> [batch]``."""
    import keras

    if callable(job.loss):
        return job.loss
    return keras.losses.get(job.loss)


def dataset_fn(job, start_step=0, worker_index=None, num_workers=1):
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
    start, or a run's end, waited 1.5-41 s with no process using CPU.
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
        return job.data

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
