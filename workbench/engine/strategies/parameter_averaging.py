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

    from workbench.engine import build, compression, loop, step, synchronous
    from workbench.engine.strategies.multi_worker_mirrored import collective_strategy

    # the collectives that average the replicas; the replicas themselves are plain
    # variables of this process, trained with no strategy at all
    strategy = collective_strategy(f"{job.run_id}-{job.launch}")
    t = loop.prepare(tf.distribute.get_strategy(), job, ctx)
    local = job.global_batch_size // job.workers
    context = tf.distribute.InputContext(num_input_pipelines=job.workers,
                                         input_pipeline_id=ctx.task.index, num_replicas_in_sync=job.workers)
    iterator = iter(build.dataset_fn(job, start_step=t.start)(context))
    # each worker's loss is the mean over its own m = global/n examples
    # every step has a bytes output (0: the steps send nothing; the average's bytes go to
    # the step it follows), timed or not
    replica_step = step.step_fn(t, build.loss(job), global_batch_size=local, timed=job.anatomy, sends=True)
    outputs = 2 + len(t.metrics) + step.extra_outputs(job.anatomy, sends=True)
    variables = build.trainable(t.model)
    reduce = compression.reducer(job.compression, variables, op="MEAN", bytes_per_pack=job.bytes_per_pack)
    # compressed runs send each replica's change since the last average (cast or quantized),
    # not the parameters themselves: the parameters keep their 32 bits
    anchors = [tf.Variable(tf.convert_to_tensor(v), trainable=False) for v in variables] if job.compression else None

    def average():
        """The replicas' mean, in place; returns (seconds, bytes handed to the collectives)."""
        def replica_fn():
            if anchors is None:
                means, sent, _ = reduce([tf.identity(tf.convert_to_tensor(v)) for v in variables])
            else:
                deltas, sent, _ = reduce([tf.convert_to_tensor(v) - a for v, a in zip(variables, anchors)])
                means = [a + d for a, d in zip(anchors, deltas)]
                for a, m in zip(anchors, means):
                    a.assign(m)
            for v, m in zip(variables, means):
                v.assign(m)
            return sent
        began = tf.timestamp()
        with tf.control_dependencies([began]):
            sent = strategy.run(replica_fn)
        with tf.control_dependencies([sent] + [tf.convert_to_tensor(v) for v in variables]):
            return tf.cast(tf.timestamp() - began, tf.float32), tf.cast(sent, tf.float32)

    @tf.function
    def run_steps(iterator, n, then_average):
        columns = [tf.TensorArray(tf.float32, size=n) for _ in range(outputs + (1 if job.anatomy else 0))]
        for i in tf.range(n):
            began = tf.timestamp()
            with tf.control_dependencies([began]):
                x, y = next(iterator)
            with tf.control_dependencies(tf.nest.flatten((x, y))):
                waited = tf.cast(tf.timestamp() - began, tf.float32)
            row = list(replica_step(x, y)) + ([waited] if job.anatomy else [])
            columns = [c.write(i, v) for c, v in zip(columns, row)]
        stacked = [c.stack() for c in columns]
        seconds, sent = tf.constant(0.0), tf.constant(0.0)
        if then_average:
            # after the steps: unchained, the average's first clock read ran as the call
            # began (seen in a profiler trace) and its time counted the steps' own
            with tf.control_dependencies(stacked):
                seconds, sent = average()
        return tf.stack(stacked), seconds, sent

    k = job.average_every
    sent_at = outputs - 1  # the bytes column (after the anatomy's communication, when timed)

    def run_chunk(done, n):  # chunks end on multiples of k (``every=k``): average there
        values, seconds, sent = run_steps(iterator, tf.constant(n), (done + n) % k == 0)
        values = values.numpy()
        if job.anatomy:  # the average is the last step's communication
            values[sent_at - 1, -1] += float(seconds)
        values[sent_at, -1] = float(sent)
        return values

    done, stopped = synchronous.lockstep(t, run_chunk, synchronous.agreement(strategy), examples=local, every=k)
    if done % k:  # the run ends on the average of the replicas, as Deeplearning4j's does
        tf.function(average)()
    return loop.finish(t, done, stopped)
