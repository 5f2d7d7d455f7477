"""Asynchronous training with ParameterServerStrategy.

Worker and PS engines run a ``tf.distribute.Server`` kept alive in the engine process;
the chief engine runs the ``ClusterCoordinator`` and the training loop.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("parameter_server")


from typing import TYPE_CHECKING, Union  # noqa: E402

if TYPE_CHECKING:
    from workbench.common.protocols import ServerResult, TaskContext, TaskResult


def train(job: "Job", ctx: "TaskContext") -> "Union[TaskResult, ServerResult]":
    """A worker or PS task starts (or keeps) its engine's server and returns; the chief
    runs the coordinator and the training loop."""
    if ctx.task.role in ("ps", "worker"):
        from workbench.engine import server

        return server.serve(ctx)
    strategy, coordinator = _strategy_and_coordinator(job, ctx)
    try:
        return _train(job, ctx, strategy, coordinator)
    except BaseException:
        _CHIEF.clear()  # after a failure the next run starts from a new strategy
        raise


# The chief's strategy and coordinator, kept for the next run on the same servers: TF never
# frees a ClusterCoordinator, so each run's new one left its 3 threads behind on the chief
# (bench/README.md: threads and memory of the chief over 30 runs).
_CHIEF = {}


def _strategy_and_coordinator(job, ctx):
    import tensorflow as tf

    # the same spec on the same engines (a replaced engine has a new id) and partitioner
    key = (ctx.task.tf_config_json, tuple(t.engine_id for t in job.tasks), repr(job.variable_partitioner))
    if _CHIEF.get("key") != key:
        _CHIEF.clear()
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=_partitioner(job))
        _CHIEF.update(key=key, strategy=strategy, coordinator=tf.distribute.coordinator.ClusterCoordinator(strategy))
    return _CHIEF["strategy"], _CHIEF["coordinator"]


def _train(job, ctx, strategy, coordinator):
    """The parameter-server loop, on the chief: functions of ``steps_per_execution`` steps
    scheduled on whichever worker is free, at most two per worker in flight, results
    collected in order; checkpoints and evaluations wait for every scheduled function."""
    import tensorflow as tf

    from workbench.engine import build, loop, step

    t = loop.prepare(strategy, job, ctx)
    pub, board, metrics, start = t.pub, t.board, t.metrics, t.start
    worker_index = tf.distribute.coordinator.experimental_get_current_worker_index
    fn = build.dataset_fn(job, start_step=0, worker_index=worker_index, num_workers=job.workers)
    # each worker's own tf.data pipeline, given the input context distribute_datasets_from_function
    # would give it (one pipeline per worker): through that wrapper the first step came later
    # and the run's end waited seconds for its iterator's remote finalizer (bench/README.md)
    context = tf.distribute.InputContext(1, 0, strategy.num_replicas_in_sync)
    # traced without converting the workbench's wrappers (a user's dataset_fn is: build.users)
    per_worker = coordinator.create_per_worker_dataset(tf.function(lambda: fn(context), autograph=False))
    iterator = iter(per_worker)
    replica_step = step.step_fn(t, build.loss(job), staleness=True, timed=job.anatomy, concurrent=True)
    outputs = 3 + len(metrics) + step.extra_outputs(job.anatomy, sends=False)
    looped = tf.function(step.steps_fn(strategy, replica_step, outputs=outputs, timed=job.anatomy), autograph=False)
    unrolled = tf.function(step.steps_fn(strategy, replica_step, outputs=outputs, unroll=True, timed=job.anatomy),
                           autograph=False)

    def timed(steps):
        """The steps, with the worker's own clock read before and after them: step times are
        timed where the work happens, not when the chief happens to collect results
        (after a checkpoint's join it collects several of a worker's calls at once)."""
        t0 = tf.timestamp()
        with tf.control_dependencies([t0]):
            out = steps()
        with tf.control_dependencies(tf.nest.flatten(out)):
            t1 = tf.timestamp()
        return worker_index(), out, t0, t1

    @tf.function(autograph=False)
    def run_looped(iterator, n):
        return timed(lambda: looped(iterator, n))

    @tf.function(autograph=False)
    def run_unrolled(iterator, n):
        return timed(lambda: unrolled(iterator, n))

    # Unrolled calls run faster but their trace and first call cost about a second: worth
    # it for long runs (see the spec's unroll_min_steps); shorter runs stay looped.
    unroll = job.steps - start >= SPEC.unroll_min_steps

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
        except (tf.errors.UnavailableError, tf.errors.InvalidArgumentError) as e:
            # the worker that ran these steps died before its results were read: they are
            # lost with it, so run them again elsewhere (the model may count a few extra)
            if not lost_with_its_worker(e):
                raise
            retries += 1
            if retries > 10 * job.workers:
                raise
            inflight.append((schedule(n), n))
            return
        # from the end of this worker's previous call (a wait for a checkpoint or for the
        # chief counts: a slow step, never an infinitely fast one), or from this call's start
        since = max(float(ended) - last_seen.get(int(worker), float(began)), 1e-6)
        # the worker idle between its calls, waiting for the chief to give it the next one
        idle = max(float(began) - last_seen.get(int(worker), float(began)), 0.0)
        last_seen[int(worker)] = float(ended)
        values, parts = values[:len(metrics)], values[len(metrics):]
        # each row at the time its call ended on its worker, not when this chief collected it:
        # calls are collected in the order they were scheduled, late and several at once while
        # another worker's first call traces (a 60-step run read 607 steps/s for ~190: figures.py)
        for j, loss in enumerate(losses):
            loop.check_loss(float(loss), done + j + 1, f"worker:{int(worker)}", job)
            pub.add(step=done + j + 1, worker=f"worker:{int(worker)}", loss=float(loss),
                    accuracy=float(hits[j]) / job.global_batch_size, step_time=since / n,
                    examples_per_s=job.global_batch_size * n / since, replicas=1, staleness=int(stale[j]),
                    time=float(ended),
                    **{name: float(v[j]) for (name, _, _), v in zip(metrics, values)},
                    **step.anatomy(parts, j), **({"wait_time": idle / n} if parts else {}))
        done += n
        board.scalars(done, loss=float(losses[-1]), **{name: float(v[-1]) for (name, _, _), v in zip(metrics, values)})
        pub.flush()

    while scheduled < job.steps and not stopped:
        # the first call runs one step, reported before the unrolled function is traced:
        # the first step comes as soon as it can
        first = scheduled == start
        n = min(1 if first else job.steps_per_execution, job.steps - scheduled,
                loop.until_next(scheduled, job.checkpoint_every, job.eval_every))
        inflight.append((schedule(n), n))
        if first and replica_step.sparse:  # traced when first scheduled: its sparse gradients, once
            pub.event("sparse_gradients", variables=replica_step.sparse)
        scheduled += n
        while len(inflight) >= (1 if first else max_inflight):
            collect_one()
        at_boundary = scheduled % (job.checkpoint_every or 1 << 30) == 0 or scheduled % (job.eval_every or 1 << 30) == 0
        if at_boundary and scheduled < job.steps:
            coordinator.join()
            while inflight:
                collect_one()
            if job.checkpoint_every and done % job.checkpoint_every == 0:
                loop.save(t, done)
            if job.eval_every and done % job.eval_every == 0:
                loop.evaluate(t, done)
        stopped = loop.stop_requested(job)
    coordinator.join()
    while inflight:
        collect_one()
    return loop.finish(t, done, stopped, model_steps=int(t.step.numpy()))


def _partitioner(job):
    import tensorflow as tf

    p = job.variable_partitioner
    if p is None:
        return None
    if isinstance(p, int):
        return tf.distribute.experimental.partitioners.FixedShardsPartitioner(p)
    kind, value = p
    return tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=value, max_shards=job.ps)


def lost_with_its_worker(error: Exception) -> bool:
    """Did reading a call's results fail because the worker that ran it is gone? Its server
    is unavailable; or a replacement took its address before TF noticed, and does not know
    the results' handles ("Unable to find the relevant tensor remote_handle"), the messages
    TF's coordinator reads as a worker's failure for the calls it runs itself
    (``cluster_coordinator._is_worker_failure``). A lost host of both workers, replaced
    there, once failed a run at its chief with "InvalidArgumentError: 2 root error(s)
    found." and no more of its text (a full run of stop 51's session): the likeliest cause
    TF's source names."""
    import tensorflow as tf

    if isinstance(error, tf.errors.UnavailableError):
        return True
    text = str(error)
    return isinstance(error, tf.errors.InvalidArgumentError) and (
        "Unable to find the relevant tensor remote_handle" in text or "unknown device" in text.lower())
