"""The replica step and ``n`` steps per ``tf.function`` call, as every strategy's loop runs
them (``synchronous``, ``strategies/parameter_server``, ``strategies/parameter_averaging``):
``step_fn`` (one step on one replica: loss, correct predictions, metrics and, when timed,
compute, communication and bytes), ``steps_fn`` (the steps of one call, looped or unrolled,
with the input's time), ``gated`` (one clock read between a step's parts) and ``anatomy``
(a step's timed parts as history columns). The run's state and its end are ``loop``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from workbench.engine import build, keras_metrics, shared_state

if TYPE_CHECKING:
    import tensorflow as tf

    from workbench.engine.loop import Training

UNROLL_CHUNK = 5  # unrolled steps per inner tf.function: see steps_fn


def step_fn(t: Training, loss_fn: Callable, staleness: bool = False, clip: Callable | None = None,
            local_replicas: int = 1, global_batch_size: int | None = None, reduce: Callable | None = None,
            timed: bool = False, sends: bool | None = None, concurrent: bool = False) -> Callable:
    """One training step on one replica: ``(loss, correct predictions[, staleness], *metrics
    [, compute, communication][, bytes])`` (``extra_outputs`` counts the bracketed ones).

    The loss is the per-example loss averaged over the global batch (``global_batch_size``,
    the job's unless given) plus this replica's share (1/replicas,
    ``tf.nn.scale_regularization_loss``) of the model's own losses (regularizers,
    ``add_loss``): summed over replicas, the gradient is one process's. With
    ``staleness=True`` it also returns the number of other updates applied to the shared
    variables between this step's read of the global step and its own update (asynchronous
    training: how stale its gradient was). Metric values are divided by ``local_replicas``
    so that summing a worker's replicas gives their mean. ``clip``: see
    ``build.aggregated_clipping``. ``reduce``: the gradients' all-reduce taken over from
    Keras (``compression.reducer``), run between the backward pass and the update.

    ``timed=True`` adds the step anatomy (``workbench.common.anatomy`` says what each part
    includes), read with ``tf.timestamp`` inside the step, in seconds, each chained by
    control dependencies to the ops it brackets: compute (forward and backward, then the
    update: for parameter-server steps, the update is the gradients' push and is counted as
    communication instead; compression's casts or quantizing), communication (the
    all-reduce; under PS, the gradient push and the global step's increment), and the bytes handed to the all-reduce. ``sends``
    (default: whether there is a ``reduce``): the bytes are an output even when not
    ``timed``, so that an untimed run that all-reduces still reports ``comm_bytes`` (with
    no ``reduce`` they are 0 here and the caller fills them in, as parameter averaging
    does).

    ``concurrent=True`` (parameter servers: other workers' steps write the same variables
    at the same time): the model's non-trainable state changes by increments pushed with the
    gradients (``shared_state.Increments``), and the optimizer counts its updates in one op
    (``shared_state.count_atomically``); Keras' own writes of both lose updates when two
    workers' steps overlap."""
    import contextlib

    import tensorflow as tf

    from workbench.engine.compression import sparse_gradients  # it imports this module

    job, model, opt, step, metrics = t.job, t.model, t.opt, t.step, t.metrics
    batch = job.global_batch_size if global_batch_size is None else global_batch_size
    sends = reduce is not None if sends is None else sends
    if reduce is not None:
        opt._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)  # summed by reduce
    if concurrent:
        shared_state.count_atomically(opt)
    sparse: list[dict] = []  # a PS step's sparse gradients, as traced (no reduce to hold them)

    def replica_step(x, y):
        if staleness:
            before = step.read_value()
        if timed:
            began = after((x, y), tf.timestamp)
            x = after(began, lambda: tf.nest.map_structure(tf.identity, x))
        state = shared_state.Increments(model) if concurrent else None
        with tf.GradientTape() as tape, state or contextlib.nullcontext():
            pred = build.call(model, x)
            per_example = loss_fn(y, pred)
            if per_example.dtype not in (tf.float32, tf.float64):  # float64 models keep float64 gradients
                per_example = tf.cast(per_example, tf.float32)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
            # Keras scales by replicas when it aggregates: compute_average_loss already does
            extra = build.extra_losses(model)
            if extra is not None:
                loss += tf.nn.scale_regularization_loss(tf.cast(extra, loss.dtype))
        variables = build.trainable(model)
        grads = tape.gradient(loss, variables)
        if staleness and not sparse:  # pushed as they are: an embedding's rows and indices
            sparse.extend(sparse_gradients(grads, variables))
        sent, codec = tf.constant(0.0), tf.constant(0.0, tf.float64)
        if timed:
            computed = after((grads, loss), tf.timestamp)
            grads = after(computed, lambda: gated(grads))
        if reduce is not None:
            grads, sent, codec = reduce(grads)
        if timed:
            reduced = after(grads, tf.timestamp)
            grads = after(reduced, lambda: gated(grads))
        if clip is not None:
            grads = clip(grads)
        graph = tf.compat.v1.get_default_graph()
        first = len(graph.get_operations())
        if state is not None:
            state.push()
        opt.apply_gradients(zip(grads, variables))
        update = graph.get_operations()[first:]  # the update's ops (its pushes to PS tasks)
        done = step.assign_add(1, read_value=True)
        out = [tf.cast(loss, tf.float32)]
        out.append(tf.reduce_sum(keras_metrics.accuracy(y, pred)) if job.classifies else tf.constant(0.0))
        if staleness:
            out.append(tf.cast(done - before - 1, tf.float32))
        out += [v / local_replicas for v in keras_metrics.metric_values(metrics, y, pred)]
        if timed:
            # the update's own ops and the global step's increment end a step (not a read
            # of every variable back: an op each, and a round trip to a PS task); with
            # several replicas in this process the update's ops are every replica's (their
            # threads take turns building it), so each reads its own variables back
            settled = update if staleness or local_replicas == 1 else [tf.convert_to_tensor(v) for v in variables]
            ended = after([done] + settled, tf.timestamp)
            if staleness:  # the update is the push of the gradients to the PS tasks
                compute, comm = computed - began, ended - computed
            else:
                # compression's casts or quantizing run on the CPU around the collectives:
                # compute (compression.py: codec)
                compute, comm = (computed - began) + (ended - reduced) + codec, reduced - computed - codec
            out += [tf.cast(compute, tf.float32) / local_replicas, tf.cast(comm, tf.float32) / local_replicas]
        if timed or sends:
            out.append(tf.cast(sent, tf.float32))
        return tuple(out)

    # traced as written wherever it is called (parameter averaging's loop is converted):
    # the user's functions it calls are converted on their own (build.users)
    wrapped = tf.autograph.experimental.do_not_convert(replica_step)
    wrapped.sparse = sparse  # filled once traced (``compression.sparse_gradients``)
    return wrapped


def delay_line(variables: list, delay: int) -> list:
    """``delay`` slots for each variable's gradient, zeros at first (``job.gradient_delay``;
    none for 0): what ``delayed`` keeps, created with the model and checkpointed with it."""
    import tensorflow as tf

    return [tf.Variable(tf.zeros([delay, *v.shape], v.dtype), trainable=False, name=f"delayed_{i}")
            for i, v in enumerate(variables)] if delay else []


def delayed(line: list, step: tf.Variable) -> Callable[[list], list]:
    """``delay(grads)``: the gradients handed to it ``len(slots)`` steps ago (zeros for a
    run's first steps), this step's kept in their place: every update then applies a
    gradient computed on the variables as they were that many updates before, the
    staleness of an asynchronous run whose ``delay + 1`` workers are equally fast. The slot
    is the global step modulo the delay (read before this step counts itself)."""
    import tensorflow as tf

    def delay(grads):
        slot = tf.math.floormod(step.read_value(), tf.cast(tf.shape(line[0])[0], step.dtype))
        old = [tf.gather(slots, slot) for slots in line]
        with tf.control_dependencies(old):
            kept = [slots.scatter_update(tf.IndexedSlices(tf.convert_to_tensor(g)[None], slot[None])).op
                    for slots, g in zip(line, grads) if g is not None]
        with tf.control_dependencies(kept):
            # a variable with no gradient keeps none (Keras then leaves it, weight decay too)
            return [tf.identity(o) if g is not None else None for o, g in zip(old, grads)]

    return delay


def after(deps: Any, value: Any) -> Any:
    """``value`` (a tensor, through ``tf.identity``, or what a callable makes: a clock read)
    created after every tensor and op in ``deps`` has run: how a step's timers bracket the
    ops they time."""
    import tensorflow as tf

    with tf.control_dependencies([d for d in tf.nest.flatten(deps, expand_composites=True) if d is not None]):
        return tf.identity(value) if not callable(value) else value()


def steps_fn(strategy: tf.distribute.Strategy, replica_step: Callable, outputs: int = 2,
             unroll: bool = False, timed: bool = False) -> Callable:
    """``run_steps(iterator, n)``: ``n`` training steps in one call, returning per step this
    worker's own summed loss and correct predictions (and the step's other ``outputs``). No
    collective beyond the gradients' all-reduce: metrics cost no extra cross-worker round
    trip (the global loss is the sum over workers). ``timed=True``: one more output, the
    seconds each step waited for its batch (``next(iterator)``, timed with ``tf.timestamp``).

    ``unroll=True`` (``n`` a Python int; one trace per distinct ``n``) writes the steps one
    after the other instead of a ``tf.while_loop``. Parameter-server steps need it: a while
    loop whose body reads and updates variables on PS tasks runs as a loop split across
    devices, which pays extra round trips every iteration. The unrolled steps are traced
    ``UNROLL_CHUNK`` at a time, as an inner ``tf.function`` called once per chunk (the last
    one shorter when ``n`` is not a multiple): the first unrolled call comes sooner than
    with all ``n`` traced in the outer function, for a few percent of steps/s, since each
    inner call waits for all of the previous one's variable updates. bench/README.md has
    the measurements behind both choices.

    AutoGraph converts none of the workbench's own code here: the loop is an explicit
    ``tf.while_loop``, the functions that call these wrappers are traced with
    ``autograph=False``, and the replica step is not converted either (``step_fn``); the
    user's functions it calls are (``build.users``)."""
    import tensorflow as tf

    def local_sum(value):
        return tf.add_n(strategy.experimental_local_results(value))

    def replicas(x, y):
        return strategy.run(replica_step, args=(x, y))

    def one_step(iterator_or_batch):
        """(values, input seconds) of one step; the batch is read from an iterator here."""
        if not timed:
            x, y = iterator_or_batch if isinstance(iterator_or_batch, tuple) else next(iterator_or_batch)
            return [local_sum(v) for v in replicas(x, y)]
        began = tf.timestamp()
        with tf.control_dependencies([began]):
            x, y = iterator_or_batch if isinstance(iterator_or_batch, tuple) else next(iterator_or_batch)
        with tf.control_dependencies(tf.nest.flatten((x, y), expand_composites=True)):
            waited = tf.cast(tf.timestamp() - began, tf.float32)
        return [local_sum(v) for v in replicas(x, y)] + [waited]

    @tf.function(autograph=False)
    def chunk(batches):
        """Steps on these batches, one after the other (one trace per chunk length)."""
        return [one_step(b) for b in batches]

    total = outputs + (1 if timed else 0)

    def run_steps(iterator, n):
        if unroll:
            rows = []
            for i in range(0, n, UNROLL_CHUNK):
                rows += chunk([next(iterator) for _ in range(min(UNROLL_CHUNK, n - i))])
            return tf.stack([tf.stack([r[k] for r in rows]) for k in range(total)])
        def body(i, *columns):
            return (i + 1, *[c.write(i, v) for c, v in zip(columns, one_step(iterator))])

        columns = [tf.TensorArray(tf.float32, size=n) for _ in range(total)]
        _, *columns = tf.while_loop(lambda i, *_: i < n, body, (tf.constant(0), *columns))
        return tf.stack([c.stack() for c in columns])

    return run_steps


def gated(tensors: list) -> list:
    """``tensors`` through one ``IdentityN`` op where they are plain tensors, created where
    this is called (inside ``after``'s control dependencies in ``step_fn``): the next part of
    a step starts after a clock read, for one op instead of one per gradient. Sparse
    gradients (``IndexedSlices``: an embedding's) each pass a ``tf.identity``, which keeps
    them sparse; None stays None. (A control dependency on every op of the next part would
    keep Grappler from folding that part's constants.)"""
    import tensorflow as tf

    out = [t if t is None or isinstance(t, tf.Tensor) else tf.identity(t) for t in tensors]
    plain = [i for i, t in enumerate(tensors) if isinstance(t, tf.Tensor)]
    for i, t in zip(plain, tf.identity_n([tensors[i] for i in plain]) if plain else []):
        out[i] = t
    return out


def extra_outputs(timed: bool, sends: bool) -> int:
    """How many outputs ``step_fn`` adds after the metrics: compute, communication and
    bytes when ``timed``; the bytes alone when it only ``sends``; none otherwise."""
    return 3 if timed else 1 if sends else 0


def anatomy(parts: list, j: int) -> dict[str, float]:
    """Step ``j``'s anatomy columns from a chunk's extra outputs (``step_fn`` with
    ``timed=True``, then ``steps_fn``'s input time), or its ``comm_bytes`` alone (an
    untimed run that all-reduces); none when the run neither times nor sends."""
    if not parts:
        return {}
    if len(parts) == 1:
        return {"comm_bytes": int(parts[0][j])}
    compute, comm, sent, waited = (float(p[j]) for p in parts)
    return {"input_time": waited, "compute_time": compute, "comm_time": comm, "comm_bytes": int(sent)}
