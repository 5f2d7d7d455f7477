"""Synchronous parameter averaging (Deeplearning4j on Spark): every worker trains its own
replica on its own shard for ``average_every`` steps, then the replicas' parameters are
replaced by their mean (an all-reduce over the workers' TF cluster).

With ``average_every=1``, plain SGD and equal shards this is single-machine SGD on the
combined batch; less frequent averaging, or a non-linear optimizer such as Adam, is not.
Only parameters are averaged; each worker keeps its own optimizer state.
"""

ROLES = ("worker",)
MULTI_ENGINE = True
SYNC_WORKERS = True
DESCRIPTION = "synchronous parameter averaging every k steps across worker engines (Deeplearning4j)"


def train(job, ctx):
    import dataclasses
    import time

    import tensorflow as tf

    from workbench.engine import build, loop, placement
    from workbench.engine.board import Board
    from workbench.engine.metrics import Publisher

    # the collectives that average the replicas; the replicas themselves are plain
    # variables of this process, trained with no strategy at all
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    pub = Publisher(job.run_dir, ctx["name"])
    model, opt, step, ckpt = loop._state(tf.distribute.get_strategy(), job)
    start = loop._restore(job, ckpt, ctx)
    manager = tf.train.CheckpointManager(ckpt, loop._checkpoint_dir(job, ctx), max_to_keep=3)
    pub.event("placement", tasks=[dict(ctx["task_row"], devices=placement.devices(ctx["task"]))],
              variables=placement.variables(model, ctx["task"]))
    board = Board(job.run_dir, ctx["is_chief"])
    local = job.global_batch_size // job.workers
    context = tf.distribute.InputContext(num_input_pipelines=job.workers,
                                         input_pipeline_id=ctx["task"].index, num_replicas_in_sync=job.workers)
    iterator = iter(build.dataset_fn(job, start_step=start)(context))
    # each worker's loss is the mean over its own m = global/n examples
    step_fn = loop._step_fn(dataclasses.replace(job, global_batch_size=local), model, opt, step, build.loss(job))
    variables = build.trainable(model)

    def average():
        def replica_fn():
            ctx = tf.distribute.get_replica_context()
            means = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, [tf.identity(tf.convert_to_tensor(v)) for v in variables])
            for v, m in zip(variables, means):
                v.assign(m)
        strategy.run(replica_fn)

    def run_steps(iterator, n, then_average):
        losses = tf.TensorArray(tf.float32, size=n)
        hits = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            x, y = next(iterator)
            loss, hit = step_fn(x, y)
            losses = losses.write(i, loss)
            hits = hits.write(i, hit)
        if then_average:
            average()
        return tf.stack([losses.stack(), hits.stack()])

    run_steps = tf.function(run_steps)
    average_now = tf.function(average)

    @tf.function
    def agree(flag):
        value = strategy.run(lambda: tf.constant(flag, tf.int32))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    done, stopped, k = start, False, job.average_every
    while done < job.steps:
        n = min(job.steps_per_execution, job.steps - done,
                loop._until_next(done, k, job.checkpoint_every, job.eval_every, job.stop_check_every))
        t0 = time.perf_counter()
        losses, hits = run_steps(iterator, tf.constant(n), (done + n) % k == 0).numpy()
        dt = time.perf_counter() - t0
        for j, loss in enumerate(losses):
            loop.check_loss(float(loss), done + j + 1, ctx["name"], job)
            pub.add(step=done + j + 1, worker=ctx["name"], loss=float(loss), accuracy=float(hits[j]) / local,
                    step_time=dt / n, examples_per_s=local * n / dt, replicas=1)
        done += n
        board.scalars(done, loss=float(losses[-1]), examples_per_s=local * job.workers * n / dt)
        pub.flush()
        if job.checkpoint_every and done % job.checkpoint_every == 0 and done < job.steps:
            manager.save(checkpoint_number=done)
            pub.event("checkpoint", step=done)
        if job.eval_every and done % job.eval_every == 0 and done < job.steps and ctx["is_chief"]:
            loop._evaluate(model, job, ctx, pub, board, done)
        if done % job.stop_check_every == 0 or done >= job.steps:
            if int(agree(int(loop._stop_requested(job)))):
                stopped = True
                break
    if done % k:  # the run ends on the average of the replicas, as Deeplearning4j's does
        average_now()
    manager.save(checkpoint_number=done)
    pub.event("checkpoint", step=done)
    return loop._finish(model, job, ctx, pub, board, done, stopped)
