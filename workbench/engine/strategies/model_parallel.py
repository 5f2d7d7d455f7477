"""Model parallelism across engines (DistBelief; TensorFlow's ``tf.device("/job:worker/task:k")``).

One model (``wb.models.split_mlp(..., devices=N)``) is cut into N consecutive stages, stage
k's variables and ops on worker engine k. The workers only run a ``tf.distribute.Server``;
the chief connects to the cluster (``tf.config.experimental_connect_to_cluster``) and runs
the loop: each call of its training function runs on the workers, stage 0 reading the
batches from its own input pipeline, the activations crossing each cut forward and their
gradients back over gRPC, straight from worker to worker. The global step and the
optimizer's own counters live on stage 0; the chief holds no variable.

The backward pass runs stage by stage, each on its stage's worker: TF builds a
``GradientTape``'s gradient ops under the device scope the gradient is asked in, so one
``tape.gradient`` for all the variables ran every stage's backward on one device, the
forward activations and the gradients crossing back to it (``tf.gradients`` colocates
them, but only in graphs). Each variable's update runs on its own worker too.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("model_parallel")


from typing import TYPE_CHECKING, Callable, Union  # noqa: E402

if TYPE_CHECKING:
    from workbench.common.protocols import ServerResult, TaskContext, TaskResult
    from workbench.engine.loop import Training


def train(job: "Job", ctx: "TaskContext") -> "Union[TaskResult, ServerResult]":
    """A worker starts (or keeps) its engine's server and returns; the chief connects to
    the workers and trains the split model across them."""
    import tensorflow as tf

    from workbench.engine import build, loop, server, step, synchronous

    if ctx.task.role == "worker":
        return server.serve(ctx)
    _connect(ctx.task)
    first = "/job:worker/replica:0/task:0"
    with tf.device(first):  # the global step and the optimizer's counters beside stage 0
        t = loop.prepare(tf.distribute.get_strategy(), job, ctx)
        # stage 0's own input pipeline, built and iterated on its worker (traced, as a
        # parameter-server worker's is)
        fn = build.dataset_fn(job, start_step=t.start)
        iterator = iter(tf.function(lambda: fn(tf.distribute.InputContext()), autograph=False)())
    stages = _stages(t.model)
    replica_step = step_fn(t, build.loss(job), stages, timed=job.anatomy)
    outputs = 2 + len(t.metrics) + step.extra_outputs(job.anatomy, sends=True)
    run_steps = tf.function(step.steps_fn(tf.distribute.get_strategy(), replica_step, outputs=outputs,
                                          timed=job.anatomy), autograph=False)

    def run_chunk(done, n):
        with tf.device(first):  # the loop runs on stage 0's worker; later stages' ops on theirs
            return run_steps(iterator, tf.constant(n)).numpy()

    # one process decides: the chief's own stop request is the agreement
    done, stopped = synchronous.lockstep(t, run_chunk, lambda flag: flag, examples=job.global_batch_size)
    return loop.finish(t, done, stopped)


_CONNECTED = {}  # {"spec": the TF_CONFIG this chief is connected with}


def _connect(task) -> None:
    """Connect this engine to its run's cluster as the chief task it is, once: a later run
    on the same engines (the same spec) finds the workers' servers where they were. The
    kernel recycles an engine whose cluster changes (``roles.fingerprint``). (Without the
    job's name TF adds a job "localhost" of its own and waits, forever, for the chief's
    address in the spec, which nothing serves.) No device filters: the workers send each
    other the activations."""
    import tensorflow as tf

    if _CONNECTED.get("spec") != task.tf_config_json:
        tf.config.experimental_connect_to_cluster(tf.distribute.cluster_resolver.TFConfigClusterResolver(),
                                                  job_name=task.role, task_index=task.index,
                                                  make_master_device_default=False)
        _CONNECTED["spec"] = task.tf_config_json


def _stages(model):
    """``[(device, [layers])]``: the split model's layers grouped by the device they run on, in order."""
    placed = getattr(model, "placed", None)
    if not placed:
        raise TypeError("Invalid value for argument 'model'. Received: a model without stages. Expected "
                        "wb.models.split_mlp(..., devices=workers) with strategy='model_parallel'.")
    stages = []
    for device, layer in placed:
        if stages and stages[-1][0] == device:
            stages[-1][1].append(layer)
        else:
            stages.append((device, [layer]))
    return stages


def step_fn(t: "Training", loss_fn: Callable, stages: list, timed: bool = False) -> Callable:
    """One training step of the split model: ``(loss, correct predictions, *metrics
    [, compute, communication], bytes)``, as ``step.step_fn``'s (its docstring says what the
    loss is).

    Forward, stage by stage on its worker: each stage's input (the batch on stage 0, the
    previous stage's activations on the others) taken on its device, its layers, and on the
    last stage the loss, the accuracy and the metrics. Backward, last stage first: each
    stage's gradients for its variables and for its input, from the gradient of its output
    taken on its device; then each variable's update on its device.

    ``bytes``: what crosses the cuts, the activations forward and their gradients back
    (``costmodel.cut_bytes``). ``timed=True`` adds the anatomy, every clock read on one
    device: compute is the sum over stages of each one's forward (from its input's
    arrival to its output) and backward (from its output's gradient's arrival to its
    gradients), each timed on its own worker; communication is the rest of the step on
    stage 0's clock, from its batch to the last update and the global step's increment:
    the cuts' transfers (and the labels' to the last stage), the variables' updates, the
    signals between the stages, the optimizer's scalar reads. A function runs its clock
    reads (stateful ops without a resource) in the order they are written: a stage's
    backward is read before the next stage's gradient arrives, or it would count that
    transfer (read after the loop, stage 1's end waited for stage 0's: at 5 Mbit its
    "compute" was 110 ms, of which 2 ms compute)."""
    import tensorflow as tf

    from workbench.engine import keras_metrics
    from workbench.engine.step import after

    job, opt, counter, metrics = t.job, t.opt, t.step, t.metrics
    variables = [[v for layer in layers for v in layer.trainable_variables] for _, layers in stages]
    updates = _placed_updates(opt)
    last = len(stages) - 1

    def replica_step(x, y):
        began = after((x, y), tf.timestamp) if timed else None
        seconds, inputs, outputs, sent = [], [], [], []
        with tf.GradientTape(persistent=True) as tape:
            h = x
            for i, (device, layers) in enumerate(stages):
                with tf.device(device):
                    h = tf.identity(h)  # the activations arrive (stage 0: the batch, already here)
                    if i:
                        tape.watch(h)
                        sent.append(2 * tf.cast(tf.size(h), tf.float32) * h.dtype.size)
                    inputs.append(h)
                    start = after(h, tf.timestamp) if timed else None
                    for layer in layers:
                        h = layer(h, training=True)
                    if i == last:
                        pred = h
                        per_example = loss_fn(y, pred)
                        if per_example.dtype not in (tf.float32, tf.float64):
                            per_example = tf.cast(per_example, tf.float32)
                        # split_mlp's layers have no regularizers: no loss of the model's own
                        h = loss = tf.nn.compute_average_loss(per_example, global_batch_size=job.global_batch_size)
                    outputs.append(h)
                    if timed:
                        seconds.append(after(h, tf.timestamp) - start)
        grads, upstream, arrived = [None] * len(stages), None, [None] * len(stages)
        for i in reversed(range(len(stages))):
            with tf.device(stages[i][0]):
                if upstream is not None:
                    upstream = tf.identity(upstream)  # the gradient arrives from the next stage
                arrived[i] = after(upstream if upstream is not None else outputs[i], tf.timestamp) if timed else None
                sources = variables[i] + ([inputs[i]] if i else [])
                found = tape.gradient(outputs[i], sources, output_gradients=upstream)
                grads[i], upstream = found[:len(variables[i])], (found[-1] if i else None)
                if timed:  # read here, before the next stage's arrival: see the docstring
                    seconds[i] += after(found, tf.timestamp) - arrived[i]
        del tape
        updates.clear()
        opt.apply_gradients(zip([g for gs in grads for g in gs], [v for vs in variables for v in vs]))
        done = counter.assign_add(1, read_value=True)
        with tf.device(stages[last][0]):
            out = [tf.cast(loss, tf.float32)]
            out.append(tf.reduce_sum(keras_metrics.accuracy(y, pred)) if job.classifies else tf.constant(0.0))
            out += keras_metrics.metric_values(metrics, y, pred)
        if timed:
            ended = after([done] + [op for ops in updates.values() for op in ops], tf.timestamp)
            compute = tf.add_n(seconds)
            out += [tf.cast(compute, tf.float32), tf.cast(tf.maximum(ended - began - compute, 0.0), tf.float32)]
        out.append(tf.add_n(sent) if sent else tf.constant(0.0))
        return tuple(out)

    return tf.autograph.experimental.do_not_convert(replica_step)


def _placed_updates(opt):
    """Make ``opt`` update each variable on the variable's own device (a Keras optimizer
    builds its updates under the caller's device scope: stage 0's, for every stage's
    variables, their gradients crossing to it and back), and sum nothing; returns {device: the update ops
    of the latest trace}, which the step's timers wait for."""
    import tensorflow as tf

    update_step, found = opt.update_step, {}
    # one replica: nothing to sum. Keras' sum of the gradients over replicas would pass them
    # all through one op (the replica context's differentiable all-reduce, an IdentityN) on
    # stage 0's device: every later stage's gradients crossed to it and back, each step
    # (measured on the bed: a 64 KB gradient of stage 1 added 69 KB each way per step)
    opt._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)

    def placed(gradient, variable, learning_rate):
        # a tf.Variable (as a strategy's update hands it), or a Keras variable holding one
        device = (variable if isinstance(variable, tf.Variable) else variable.value).device
        graph = tf.compat.v1.get_default_graph()
        first = len(graph.get_operations())
        with tf.device(device):
            result = update_step(gradient, variable, learning_rate)
        found.setdefault(device, []).extend(graph.get_operations()[first:])
        return result

    opt.update_step = placed
    return found
