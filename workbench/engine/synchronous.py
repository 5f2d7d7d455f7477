"""The loop of the synchronous strategies (single, mirrored, multi-worker mirrored; parameter
averaging drives ``lockstep`` with its own steps): every worker runs the same steps, chunks
of them per ``tf.function`` call, and all take the same stop decision."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from workbench.engine import build, compression, loop, profile, step

if TYPE_CHECKING:
    import tensorflow as tf

    from workbench.common.job import Job
    from workbench.common.protocols import TaskContext, TaskResult
    from workbench.engine.loop import Training


def train(strategy: tf.distribute.Strategy, job: Job, ctx: TaskContext) -> TaskResult:
    """Train under a synchronous ``strategy``; every worker of a multi-worker run calls it."""
    import tensorflow as tf

    t = loop.prepare(strategy, job, ctx)
    workers = job.workers if ctx.task.tf_config else 1  # MWMS: workers split the global batch
    local = strategy.num_replicas_in_sync // workers
    iterator = iter(strategy.distribute_datasets_from_function(build.dataset_fn(job, start_step=t.start)))
    replicas = strategy.num_replicas_in_sync
    # with several replicas the step runs the gradients' all-reduce itself: timed, its bytes
    # counted (with or without the anatomy), and compressed when the job asks
    reduce = compression.reducer(job.compression, build.trainable(t.model),
                                  bytes_per_pack=job.bytes_per_pack) if replicas > 1 else None
    clip = build.aggregated_clipping(t.opt, replicas, summed=reduce is not None)
    if t.delay_line:  # job.gradient_delay (single): each update applies an earlier step's gradients
        delay = step.delayed(t.delay_line, t.step)
        clip = delay if clip is None else (lambda grads, clip=clip: delay(clip(grads)))
    replica_step = step.step_fn(t, build.loss(job), clip=clip, local_replicas=local, reduce=reduce,
                                timed=job.anatomy)
    outputs = 2 + len(t.metrics) + step.extra_outputs(job.anatomy, sends=reduce is not None)
    steps = step.steps_fn(strategy, replica_step, outputs=outputs, timed=job.anatomy)
    run_steps = tf.function(steps, autograph=False)

    @tf.function(autograph=False)
    def run_steps_and_agree(iterator, n, flag):
        """The steps, then the stop agreement in the same call: one call and one collective
        less per check than a separate ``agreement`` (TF's best loop reduces once per call)."""
        out = steps(iterator, n)
        with tf.control_dependencies([out]), tf.name_scope(profile.AGREEMENT):
            value = strategy.run(lambda: tf.identity(flag))
            return out, strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    reported = []

    def traced():  # the first call traced the step: its sparse gradients, once (compression.sparse_gradients)
        if not reported and getattr(reduce, "sparse", None):
            t.pub.event("sparse_gradients", variables=reduce.sparse)
            reported.append(True)

    def run_chunk(done, n):
        out = run_steps(iterator, tf.constant(n)).numpy()
        traced()
        return out

    def run_chunk_and_agree(done, n, flag):
        out, agreed = run_steps_and_agree(iterator, tf.constant(n), tf.constant(flag, tf.int32))
        traced()
        return out.numpy(), int(agreed)

    # each replica's loss is averaged over the global batch: x workers is this worker's mean
    done, stopped = lockstep(t, run_chunk, None, examples=job.global_batch_size / workers,
                             loss_scale=workers, replicas=strategy.num_replicas_in_sync,
                             run_chunk_and_agree=run_chunk_and_agree)
    return loop.finish(t, done, stopped)


def agreement(strategy: tf.distribute.Strategy) -> Callable[[int], tf.Tensor]:
    """``agree(flag) -> sum over workers``: every worker must take the same stop decision,
    or the others hang in the next collective."""
    import tensorflow as tf

    @tf.function
    def agree(flag):
        value = strategy.run(lambda: tf.constant(flag, tf.int32))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    return agree


def lockstep(t: Training, run_chunk: Callable, agree: Callable[[int], tf.Tensor] | None, examples: float,
             loss_scale: float = 1.0, replicas: int = 1, every: int = 0,
             run_chunk_and_agree: Callable | None = None) -> tuple[int, bool]:
    """Chunks of ``run_chunk(done, n) -> (losses, hits, *metric values)`` up to the next
    checkpoint, evaluation, agreed stop check or multiple of ``every``; each step published
    as this worker's shard of ``examples`` examples (its loss x ``loss_scale``). Returns
    (steps done, stopped). Workers agree on stopping with ``agree(flag) -> sum over
    workers`` after each chunk that ends at a check; or, when given (``agree`` None),
    ``run_chunk_and_agree(done, n, flag) -> (outputs, sum)`` runs such a chunk and the
    agreement in one call (with the stop flag read as the chunk starts; ``run.profile()``
    leaves its collective out, as it leaves out ``agree``'s calls)."""
    if agree is None and run_chunk_and_agree is None:
        raise ValueError("lockstep needs agree or run_chunk_and_agree: the workers must agree on stopping")
    profiling = profile.Profiling(t)
    try:
        return _lockstep(t, run_chunk, agree, examples, loss_scale, replicas, every, profiling,
                         run_chunk_and_agree)
    finally:
        profiling.close()


def _lockstep(t, run_chunk, agree, examples, loss_scale, replicas, every, profiling, run_chunk_and_agree):
    job, ctx, pub, board, metrics = t.job, t.ctx, t.pub, t.board, t.metrics
    done = t.start
    while done < job.steps:
        n = min(job.steps_per_execution, job.steps - done,
                loop.until_next(done, every, job.checkpoint_every, job.eval_every, job.stop_check_every))
        check = (done + n) % job.stop_check_every == 0 or done + n >= job.steps  # the same on every worker
        agreed = None
        t0 = time.perf_counter()
        if check and run_chunk_and_agree is not None:
            (losses, hits, *values), agreed = run_chunk_and_agree(done, n, int(loop.stop_requested(job)))
        else:
            losses, hits, *values = run_chunk(done, n)
        dt = time.perf_counter() - t0
        ended = time.time()  # every row of the call stamped with its end: one chunk (figures.BATCH_GAP)
        values, parts = values[:len(metrics)], values[len(metrics):]
        for j, loss in enumerate(losses):
            # this worker's shard: its mean loss and accuracy over its examples of the step
            loop.check_loss(float(loss), done + j + 1, ctx.name, job)
            pub.add(step=done + j + 1, worker=ctx.name, time=ended, loss=float(loss) * loss_scale,
                    accuracy=float(hits[j]) / examples, step_time=dt / n,
                    examples_per_s=examples * n / dt, replicas=replicas,
                    **{name: float(v[j]) for (name, _, _), v in zip(metrics, values)}, **step.anatomy(parts, j))
        done += n
        profiling.check(done)
        board.scalars(done, loss=float(losses[-1]) * loss_scale, examples_per_s=job.global_batch_size * n / dt,
                      **{name: float(v[-1]) for (name, _, _), v in zip(metrics, values)})
        pub.flush()
        if job.checkpoint_every and done % job.checkpoint_every == 0 and done < job.steps:
            loop.save(t, done)
        if job.eval_every and done % job.eval_every == 0 and done < job.steps and ctx.is_chief:
            loop.evaluate(t, done)
        if check:
            if agreed is None:
                agreed = int(agree(int(loop.stop_requested(job))))
            if agreed:
                return done, True
    return done, False
