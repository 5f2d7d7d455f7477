"""The training loops that run on engines: synchronous (single, mirrored, MWMS) and
parameter-server. Keras 3 ``fit`` fails under both multi-worker strategies, so the
workbench owns a custom loop: ``strategy.run`` inside ``tf.function``, per-replica batch =
global batch / replicas, loss averaged over the global batch."""

import math
import os
import time

from workbench.common.job import UNROLL_MIN_STEPS
from workbench.engine import build, placement
from workbench.engine.board import Board
from workbench.engine.metrics import Publisher
from workbench.store import RunDir

UNROLL_CHUNK = 5  # unrolled steps per inner tf.function: see _steps_fn


def check_loss(loss, step, worker, job):
    """A NaN or infinite loss ends the run with an error saying so, at the step it appeared."""
    if not math.isfinite(loss):
        raise FloatingPointError(
            f"The loss became {loss} at step {step} on {worker} (learning_rate={job.learning_rate!r}, "
            f"optimizer={job.optimizer!r}): training diverged. Lower the learning rate, or check the data "
            "for NaN or infinite values.")


def _stop_requested(job):
    return RunDir(job.run_dir).stop_requested()


def _checkpoint_dir(job, ctx):
    if ctx["is_chief"]:
        return str(RunDir(job.run_dir).checkpoints_dir)
    # MWMS: every worker must save (saving may run collectives); only the chief's is kept
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"{job.run_id}-ckpt-{ctx['name']}")


def _state(strategy, job):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(job.seed)
    with strategy.scope():
        model = build.model(job)
        opt = build.optimizer(job)
        opt.build(build.trainable(model))
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    build.check_fit(model, job, build.loss(job))
    build.eval_batches(job)  # a dataset_fn's evaluation data is checked now, not after training
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt, step=step)
    return model, opt, step, ckpt


def _restore(job, ckpt, ctx):
    import tensorflow as tf

    if not job.resume:
        return 0
    checkpoints = RunDir(job.run_dir).checkpoints_dir
    latest = tf.train.latest_checkpoint(str(checkpoints))
    if latest is None:
        raise FileNotFoundError(f"resume=True but no checkpoint under {checkpoints}")
    ckpt.restore(latest).expect_partial()
    return int(ckpt.step.numpy())


def _evaluate(model, job, ctx, pub, board, step, metrics=()):
    """Loss, accuracy (sparse labels) and every metric over the evaluation data, on this
    (the chief's) process; None when the run has none."""
    batches = build.eval_batches(job)
    if batches is None:
        return None
    import numpy as np

    lf, count, correct, loss_sum = build.loss(job), 0, 0, 0.0
    for _, metric, _ in metrics:
        metric.reset_state()
    for x, y in batches:
        pred = model(x, training=False) if build.keras_model(model) else model(x)
        loss_sum += float(np.sum(lf(y, pred)))
        count += len(y)
        if job.classifies:
            correct += int(np.sum(np.argmax(np.asarray(pred), axis=-1) == np.reshape(y, [-1])))
        for _, metric, _ in metrics:
            metric.update_state(y, pred)
    if not count:
        return None
    result = {"step": step, "test_loss": loss_sum / count}
    if job.classifies:
        result["test_accuracy"] = correct / count
    result.update({f"test_{name}": float(metric.result()) for name, metric, _ in metrics})
    pub.event("eval", **result)
    board.scalars(step, force=True, **{k: v for k, v in result.items() if k != "step"})
    return result


def _step_fn(job, model, opt, step, loss_fn, metrics=(), staleness=False, clip=None, local_replicas=1):
    """One training step on one replica: ``(loss, correct predictions[, staleness], *metrics)``.

    The loss is the per-example loss averaged over the global batch plus this replica's
    share (1/replicas, ``tf.nn.scale_regularization_loss``) of the model's own losses
    (regularizers, ``add_loss``): summed over replicas, the gradient is one process's.
    With ``staleness=True`` it also returns the number of other updates applied to the
    shared variables between this step's read of the global step and its own update
    (asynchronous training: how stale its gradient was). Metric values are divided by
    ``local_replicas`` so that summing a worker's replicas gives their mean. ``clip``:
    see ``build.aggregated_clipping``."""
    import tensorflow as tf

    def step_fn(x, y):
        if staleness:
            before = step.read_value()
        with tf.GradientTape() as tape:
            pred = build.call(model, x)
            per_example = loss_fn(y, pred)
            if per_example.dtype not in (tf.float32, tf.float64):  # float64 models keep float64 gradients
                per_example = tf.cast(per_example, tf.float32)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=job.global_batch_size)
            # Keras scales by replicas when it aggregates: compute_average_loss already does
            extra = build.extra_losses(model)
            if extra is not None:
                loss += tf.nn.scale_regularization_loss(tf.cast(extra, loss.dtype))
        variables = build.trainable(model)
        grads = tape.gradient(loss, variables)
        if clip is not None:
            grads = clip(grads)
        opt.apply_gradients(zip(grads, variables))
        after = step.assign_add(1, read_value=True)
        out = [tf.cast(loss, tf.float32)]
        if not job.classifies:
            out.append(tf.constant(0.0))
        else:
            hit = tf.equal(tf.argmax(pred, axis=-1, output_type=tf.int64), tf.cast(tf.reshape(y, [-1]), tf.int64))
            out.append(tf.reduce_sum(tf.cast(hit, tf.float32)))
        if staleness:
            out.append(tf.cast(after - before - 1, tf.float32))
        out += [v / local_replicas for v in build.metric_values(metrics, y, pred)]
        return tuple(out)

    return step_fn


def train_synchronous(strategy, job, ctx):
    import tensorflow as tf

    pub, model, opt, step, start, manager, board, metrics = prepare(strategy, job, ctx)
    workers = job.workers if ctx["task"].tf_config else 1  # MWMS: workers split the global batch
    local = strategy.num_replicas_in_sync // workers
    iterator = iter(strategy.distribute_datasets_from_function(build.dataset_fn(job, start_step=start)))
    clip = build.aggregated_clipping(opt, strategy.num_replicas_in_sync)
    step_fn = _step_fn(job, model, opt, step, build.loss(job), metrics, clip=clip, local_replicas=local)
    run_steps = tf.function(_steps_fn(strategy, step_fn, outputs=2 + len(metrics)))

    def run_chunk(done, n):
        return run_steps(iterator, tf.constant(n)).numpy()

    # each replica's loss is averaged over the global batch: x workers is this worker's mean
    done, stopped = lockstep(job, ctx, pub, board, manager, model, start, run_chunk, agreement(strategy),
                             examples=job.global_batch_size / workers, loss_scale=workers,
                             replicas=strategy.num_replicas_in_sync, metrics=metrics)
    return finish(model, job, ctx, pub, board, manager, done, stopped, metrics=metrics)


def prepare(strategy, job, ctx):
    """What every training loop starts with: the metrics publisher, the model, optimizer and
    step counter built under ``strategy`` (restored when resuming), a checkpoint manager,
    the placement event, TensorBoard and the run's Keras metrics (built outside the
    strategy). Returns (pub, model, opt, step, start, manager, board, metrics)."""
    import tensorflow as tf

    pub = Publisher(job.run_dir, ctx["name"])
    model, opt, step, ckpt = _state(strategy, job)
    start = _restore(job, ckpt, ctx)
    manager = tf.train.CheckpointManager(ckpt, _checkpoint_dir(job, ctx), max_to_keep=3)
    pub.event("placement", tasks=[dict(ctx["task_row"], devices=placement.devices(ctx["task"]))],
              variables=placement.variables(model, ctx["task"], opt))
    board = Board(job.run_dir, ctx["is_chief"])
    return pub, model, opt, step, start, manager, board, build.metrics(job)


def agreement(strategy):
    """``agree(flag) -> sum over workers``: every worker must take the same stop decision,
    or the others hang in the next collective."""
    import tensorflow as tf

    @tf.function
    def agree(flag):
        value = strategy.run(lambda: tf.constant(flag, tf.int32))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    return agree


def lockstep(job, ctx, pub, board, manager, model, start, run_chunk, agree, examples, loss_scale=1.0,
             replicas=1, every=0, metrics=()):
    """The loop of the synchronous strategies: chunks of ``run_chunk(done, n) -> (losses,
    hits, *metric values)`` up to the next checkpoint, evaluation, agreed stop check or
    multiple of ``every``; each step published as this worker's shard of ``examples``
    examples (its loss x ``loss_scale``). Returns (steps done, stopped)."""
    done = start
    while done < job.steps:
        n = min(job.steps_per_execution, job.steps - done,
                _until_next(done, every, job.checkpoint_every, job.eval_every, job.stop_check_every))
        t0 = time.perf_counter()
        losses, hits, *values = run_chunk(done, n)
        dt = time.perf_counter() - t0
        for j, loss in enumerate(losses):
            # this worker's shard: its mean loss and accuracy over its examples of the step
            check_loss(float(loss), done + j + 1, ctx["name"], job)
            pub.add(step=done + j + 1, worker=ctx["name"], loss=float(loss) * loss_scale,
                    accuracy=float(hits[j]) / examples, step_time=dt / n,
                    examples_per_s=examples * n / dt, replicas=replicas,
                    **{name: float(v[j]) for (name, _, _), v in zip(metrics, values)})
        done += n
        board.scalars(done, loss=float(losses[-1]) * loss_scale, examples_per_s=job.global_batch_size * n / dt,
                      **{name: float(v[-1]) for (name, _, _), v in zip(metrics, values)})
        pub.flush()
        if job.checkpoint_every and done % job.checkpoint_every == 0 and done < job.steps:
            manager.save(checkpoint_number=done)
            pub.event("checkpoint", step=done)
        if job.eval_every and done % job.eval_every == 0 and done < job.steps and ctx["is_chief"]:
            _evaluate(model, job, ctx, pub, board, done, metrics)
        if done % job.stop_check_every == 0 or done >= job.steps:
            if int(agree(int(_stop_requested(job)))):
                return done, True
    return done, False


def _steps_fn(strategy, step_fn, outputs=2, unroll=False):
    """``n`` training steps in one call, returning per step this worker's own summed loss and
    correct predictions. No collective beyond the gradients' all-reduce: metrics cost no
    extra cross-worker round trip (the global loss is the sum over workers).

    ``unroll=True`` (``n`` a Python int; one trace per distinct ``n``) writes the steps one
    after the other instead of a ``tf.while_loop``. Parameter-server steps need it: a while
    loop whose body reads and updates variables on PS tasks runs as a loop split across
    devices, which pays extra round trips every iteration (1 PS + 2 workers, digits MLP, 10
    steps per function: x1.2-1.5 steps/s unrolled, measured here). The unrolled steps are
    traced ``UNROLL_CHUNK`` at a time, as an inner ``tf.function`` called once per chunk
    (the last one shorter when ``n`` is not a multiple): from step 1 to the end of the first
    unrolled call (20 steps) took a median 2.3 s (1.8-3.1) with all ``n`` traced in the
    outer function, 1.2 s (1.0-2.1) in chunks of 5 (12 alternated pairs, digits and wide
    MLPs). Chunks cost some steps/s, since each inner call waits for all of the previous
    one's variable updates: a median 3% (-13% to +5%) over 12 alternated pairs of
    1,000-3,000-step runs, of which 11 still reached their last step sooner; past ~12,000
    steps the 1 s saved is spent again. One step per inner function ran x0.75-0.96 slower."""
    import tensorflow as tf

    def local_sum(value):
        return tf.add_n(strategy.experimental_local_results(value))

    @tf.function
    def chunk(batches):
        """Steps on these batches, one after the other (one trace per chunk length)."""
        rows = []
        for x, y in batches:
            values = strategy.run(step_fn, args=(x, y))
            rows.append([local_sum(v) for v in values])
        return rows

    def run_steps(iterator, n):
        if unroll:
            rows = []
            for i in range(0, n, UNROLL_CHUNK):
                rows += chunk([next(iterator) for _ in range(min(UNROLL_CHUNK, n - i))])
            return tf.stack([tf.stack([r[k] for r in rows]) for k in range(outputs)])
        columns = [tf.TensorArray(tf.float32, size=n) for _ in range(outputs)]
        for i in tf.range(n):
            x, y = next(iterator)
            values = strategy.run(step_fn, args=(x, y))
            columns = [c.write(i, local_sum(v)) for c, v in zip(columns, values)]
        return tf.stack([c.stack() for c in columns])

    return run_steps


def _until_next(done, *intervals):
    """Steps until the next multiple of any positive interval."""
    return min([i - done % i for i in intervals if i] or [1 << 30])


def finish(model, job, ctx, pub, board, manager, done, stopped, metrics=(), **checkpoint_info):
    """The last checkpoint, the final evaluation (chief), the weights; the task's result."""
    import numpy as np

    manager.save(checkpoint_number=done)
    pub.event("checkpoint", step=done, **checkpoint_info)

    evaluation = _evaluate(model, job, ctx, pub, board, done, metrics) if ctx["is_chief"] else None
    board.close()
    weights = None
    if ctx["is_chief"]:
        weights = [np.asarray(v) for v in (model.get_weights() if build.keras_model(model)
                                           else [w.numpy() for w in model.trainable_variables])]
    pub.close()
    return {"rows": pub.rows, "events": pub.events, "final_step": done, "stopped": stopped,
            "evaluation": evaluation, "weights": weights}


# The chief's strategy and coordinator, kept for the next run on the same servers: TF never
# frees a ClusterCoordinator, so each run's new one left its 3 threads behind on the chief
# (96 threads after 30 runs; with this, 9) and the chief grew 3.6 MB per run (now 2.8).
_CHIEF = {}


def _strategy_and_coordinator(job, ctx):
    import tensorflow as tf

    # the same spec on the same engines (a replaced engine has a new id) and partitioner
    key = (ctx["task"].tf_config_json, tuple(t.engine_id for t in job.tasks), repr(job.variable_partitioner))
    if _CHIEF.get("key") != key:
        _CHIEF.clear()
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=_partitioner(job))
        _CHIEF.update(key=key, strategy=strategy, coordinator=tf.distribute.coordinator.ClusterCoordinator(strategy))
    return _CHIEF["strategy"], _CHIEF["coordinator"]


def train_parameter_server(job, ctx):
    strategy, coordinator = _strategy_and_coordinator(job, ctx)
    try:
        return _train_parameter_server(job, ctx, strategy, coordinator)
    except BaseException:
        _CHIEF.clear()  # after a failure the next run starts from a new strategy
        raise


def _train_parameter_server(job, ctx, strategy, coordinator):
    import tensorflow as tf

    pub, model, opt, step, start, manager, board, metrics = prepare(strategy, job, ctx)
    worker_index = tf.distribute.coordinator.experimental_get_current_worker_index
    fn = build.dataset_fn(job, start_step=0, worker_index=worker_index, num_workers=job.workers)
    # each worker's own tf.data pipeline, given the input context distribute_datasets_from_function
    # would give it (one pipeline per worker). Through that wrapper instead (re-measured with
    # tf.data autotuning off, 3 alternated pairs of 3,000-step digits runs): the first step
    # came 0.1-0.2 s later, 342-368 steps/s against 351-473, and the run's end (removing its
    # iterator's remote finalizer) waited 1.75-9.5 s after the last step, against 0.13-0.15 s
    context = tf.distribute.InputContext(1, 0, strategy.num_replicas_in_sync)
    per_worker = coordinator.create_per_worker_dataset(lambda: fn(context))
    iterator = iter(per_worker)
    step_fn = _step_fn(job, model, opt, step, build.loss(job), metrics, staleness=True)

    looped = tf.function(_steps_fn(strategy, step_fn, outputs=3 + len(metrics)))
    unrolled = tf.function(_steps_fn(strategy, step_fn, outputs=3 + len(metrics), unroll=True))

    def timed(steps):
        """The steps, with the worker's own clock read before and after them: step times are
        measured where the work happens, not when the chief happens to collect results
        (after a checkpoint's join it collects several of a worker's calls at once)."""
        t0 = tf.timestamp()
        with tf.control_dependencies([t0]):
            out = steps()
        with tf.control_dependencies(tf.nest.flatten(out)):
            t1 = tf.timestamp()
        return worker_index(), out, t0, t1

    @tf.function
    def run_looped(iterator, n):
        return timed(lambda: looped(iterator, n))

    @tf.function
    def run_unrolled(iterator, n):
        return timed(lambda: unrolled(iterator, n))

    # Unrolled calls run x1.2-1.5 faster but their trace and first call cost ~1.2 s
    # here: worth it from ~1,000 steps (see UNROLL_MIN_STEPS); shorter runs stay looped.
    unroll = job.steps - start >= UNROLL_MIN_STEPS

    def schedule(n):
        """Full-length calls of long runs unrolled (traced once, the fast kind); every other
        call (the first step, pieces up to a checkpoint, the end, short runs) looped: one
        trace for all lengths."""
        if unroll and n == job.steps_per_execution and n > 1:
            return coordinator.schedule(run_unrolled, args=(iterator, n))
        return coordinator.schedule(run_looped, args=(iterator, tf.constant(n)))

    inflight, done, scheduled, stopped = [], start, start, False
    last_seen = {}
    max_inflight = 2 * job.workers

    retries = 0

    def collect_one():
        nonlocal done, retries
        remote, n = inflight.pop(0)
        try:
            worker, (losses, hits, stale, *values), began, ended = remote.fetch()
        except tf.errors.UnavailableError:
            # the worker that ran these steps died before its results were read: they are
            # lost with it, so run them again elsewhere (the model may count a few extra)
            retries += 1
            if retries > 10 * job.workers:
                raise
            inflight.append((schedule(n), n))
            return
        # from the end of this worker's previous call (a wait for a checkpoint or for the
        # chief counts: a slow step, never an infinitely fast one), or from this call's start
        since = max(float(ended) - last_seen.get(int(worker), float(began)), 1e-6)
        last_seen[int(worker)] = float(ended)
        for j, loss in enumerate(losses):
            check_loss(float(loss), done + j + 1, f"worker:{int(worker)}", job)
            pub.add(step=done + j + 1, worker=f"worker:{int(worker)}", loss=float(loss),
                    accuracy=float(hits[j]) / job.global_batch_size, step_time=since / n,
                    examples_per_s=job.global_batch_size * n / since, replicas=1, staleness=int(stale[j]),
                    **{name: float(v[j]) for (name, _, _), v in zip(metrics, values)})
        done += n
        board.scalars(done, loss=float(losses[-1]), **{name: float(v[-1]) for (name, _, _), v in zip(metrics, values)})
        pub.flush()

    while scheduled < job.steps and not stopped:
        # the first call runs one step, reported before the unrolled function is traced:
        # the first step comes as soon as it can
        first = scheduled == start
        n = min(1 if first else job.steps_per_execution, job.steps - scheduled,
                _until_next(scheduled, job.checkpoint_every, job.eval_every))
        inflight.append((schedule(n), n))
        scheduled += n
        while len(inflight) >= (1 if first else max_inflight):
            collect_one()
        at_boundary = scheduled % (job.checkpoint_every or 1 << 30) == 0 or scheduled % (job.eval_every or 1 << 30) == 0
        if at_boundary and scheduled < job.steps:
            coordinator.join()
            while inflight:
                collect_one()
            if job.checkpoint_every and done % job.checkpoint_every == 0:
                manager.save(checkpoint_number=done)
                pub.event("checkpoint", step=done)
            if job.eval_every and done % job.eval_every == 0:
                _evaluate(model, job, ctx, pub, board, done, metrics)
        stopped = _stop_requested(job)
    coordinator.join()
    while inflight:
        collect_one()
    return finish(model, job, ctx, pub, board, manager, done, stopped, metrics, model_steps=int(step.numpy()))


def _partitioner(job):
    import tensorflow as tf

    p = job.variable_partitioner
    if p is None:
        return None
    if isinstance(p, int):
        return tf.distribute.experimental.partitioners.FixedShardsPartitioner(p)
    kind, value = p
    return tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=value, max_shards=job.ps)
