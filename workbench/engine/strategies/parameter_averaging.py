"""Synchronous parameter averaging (Deeplearning4j on Spark): every worker trains its own
replica on its own shard for ``average_every`` steps, then the replicas' parameters are
replaced by their mean (an all-reduce over the workers' TF cluster).

With ``average_every=1``, plain SGD and equal shards this is single-machine SGD on the
combined batch; less frequent averaging, or a non-linear optimizer such as Adam, is not.
Only parameters are averaged; each worker keeps its own optimizer state.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("parameter_averaging")


from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    from workbench.common.protocols import TaskContext, TaskResult


def train(job: "Job", ctx: "TaskContext") -> "TaskResult":
    import tensorflow as tf

    from workbench.engine import build, loop, synchronous

    # the collectives that average the replicas; the replicas themselves are plain
    # variables of this process, trained with no strategy at all
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    t = loop.prepare(tf.distribute.get_strategy(), job, ctx)
    local = job.global_batch_size // job.workers
    context = tf.distribute.InputContext(num_input_pipelines=job.workers,
                                         input_pipeline_id=ctx.task.index, num_replicas_in_sync=job.workers)
    iterator = iter(build.dataset_fn(job, start_step=t.start)(context))
    # each worker's loss is the mean over its own m = global/n examples
    replica_step = loop.step_fn(t, build.loss(job), global_batch_size=local)
    outputs = 2 + len(t.metrics)
    variables = build.trainable(t.model)

    def average():
        def replica_fn():
            ctx = tf.distribute.get_replica_context()
            means = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, [tf.identity(tf.convert_to_tensor(v)) for v in variables])
            for v, m in zip(variables, means):
                v.assign(m)
        strategy.run(replica_fn)

    @tf.function
    def run_steps(iterator, n, then_average):
        columns = [tf.TensorArray(tf.float32, size=n) for _ in range(outputs)]
        for i in tf.range(n):
            x, y = next(iterator)
            columns = [c.write(i, v) for c, v in zip(columns, replica_step(x, y))]
        if then_average:
            average()
        return tf.stack([c.stack() for c in columns])

    k = job.average_every

    def run_chunk(done, n):  # chunks end on multiples of k (``every=k``): average there
        return run_steps(iterator, tf.constant(n), (done + n) % k == 0).numpy()

    done, stopped = synchronous.lockstep(t, run_chunk, synchronous.agreement(strategy), examples=local, every=k)
    if done % k:  # the run ends on the average of the replicas, as Deeplearning4j's does
        tf.function(average)()
    return loop.finish(t, done, stopped)
