"""The peer: one task of a plain tf.distribute job, written the way TensorFlow's
multi-worker and parameter-server tutorials write it (custom loop, TF_CONFIG set by
whoever launched the process). Run by bench/peer.py, one process per task; the chief (or
MWMS worker 0) prints one JSON line: when its first step finished and its steady steps/s.

    TF_CONFIG=... python bench/peer_task.py {mwms|pss} WORKLOAD STEPS [STEPS_PER_SCHEDULE]

``--bursts`` (MWMS): the processes stay after the run and run more steps on request
(bench/peer.py's ``Bursts``). STEPS_PER_SCHEDULE (default 1, the tutorial's) loops that many steps inside each scheduled
function (PSS) or each ``tf.function`` call (MWMS, one cross-worker reduce per call) with
``tf.range``: TensorFlow's own answer, as a reference.
"""

import json
import os
import sys
import time

T_START = time.time()  # the process launched (imports follow)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def workload(name):
    if name == "digits":
        from sklearn.datasets import load_digits

        d = load_digits()
        return (d.data / 16.0).astype("float32"), d.target.astype("int32"), (64, 32), 128
    rng = np.random.default_rng(0)  # the wide MLP on MNIST-sized synthetic inputs
    x = rng.normal(size=(4096, 784)).astype("float32")
    return x, rng.integers(0, 10, 4096).astype("int32"), (512,), 512


def build(hidden):
    layers = [keras.layers.Dense(h, activation="relu") for h in hidden] + [keras.layers.Dense(10, activation="softmax")]
    return keras.Sequential(layers)


def replica_step(strategy, features, hidden, batch):
    """The tutorials' model (built under ``strategy``) and replica step: loss averaged over
    the global batch, one SGD update."""
    with strategy.scope():
        model = build(hidden)
        model.build((None, features))
        optimizer = keras.optimizers.SGD(0.1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction="none")

    def step_fn(inputs):
        xb, yb = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step_fn


def mwms(x, y, hidden, batch, steps, per_call=1):
    """The tutorial's loop (one step per call, a cross-worker loss reduce every step), or with
    ``per_call`` > 1 TF's best practice for the same computation: ``per_call`` steps per
    ``tf.function`` call in a ``tf.range`` loop, one reduce per call (what Keras'
    ``steps_per_execution`` does)."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    step_fn = replica_step(strategy, x.shape[1], hidden, batch)

    def dataset_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat()
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(batch)).prefetch(2)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    @tf.function
    def train_step(iterator):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step_fn, args=(next(iterator),)), axis=None)

    @tf.function
    def train_steps(iterator):
        loss = strategy.run(step_fn, args=(next(iterator),))
        for _ in tf.range(per_call - 1):
            loss = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)

    def call():
        (train_step if per_call == 1 else train_steps)(iterator).numpy()

    times = []
    for _ in range(steps // per_call):
        call()
        times.append(time.time())
    start = max(1, len(times) // 5)  # a fifth of the calls warm up, the rest are timed
    return ({"first_step": times[0], "steps_per_s": (len(times) - 1 - start) * per_call / (times[-1] - times[start])},
            call)


def bursts(call, per_call, lead):
    """``--bursts`` (MWMS): after the run, a step count per line on standard input, run
    ``per_call`` steps per call on every worker; the lead prints each burst's steps/s over
    its last calls, a fifth of them left out as warm-up (as ``mwms`` times a run, and as
    bench/versus_peer.py's ``steady`` times the workbench's)."""
    for line in sys.stdin:
        times = []
        for _ in range(max(2, int(line) // per_call)):
            call()
            times.append(time.time())
        start = max(1, len(times) // 5) if len(times) > 2 else 0
        if lead:
            print(json.dumps({"steps_per_s": (len(times) - 1 - start) * per_call / (times[-1] - times[start])}),
                  flush=True)


def pss(x, y, hidden, batch, steps, per_schedule=1):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    step_fn = replica_step(strategy, x.shape[1], hidden, batch)

    def dataset_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat()
        return ds.batch(batch).prefetch(2)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def train_step(iterator):
        if per_schedule == 1:
            return strategy.run(step_fn, args=(next(iterator),))
        for _ in tf.range(per_schedule):
            strategy.run(step_fn, args=(next(iterator),))

    # the tutorial's loop: schedule, then join; the first call is fetched alone (cold
    # start), a fifth of the steps warm up, the rest are timed
    calls = steps // per_schedule
    coordinator.schedule(train_step, args=(iterator,)).fetch()
    first = time.time()
    warm = max(1, calls // 5)
    for _ in range(warm):
        coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()
    t0 = time.time()
    for _ in range(calls - warm - 1):
        coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()
    return {"first_step": first, "steps_per_s": (calls - warm - 1) * per_schedule / (time.time() - t0)}


def main():
    serve = "--bursts" in sys.argv
    argv = [a for a in sys.argv if a != "--bursts"]
    kind, name, steps = argv[1], argv[2], int(argv[3])
    per_schedule = int(argv[4]) if len(argv) > 4 else 1
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    if kind == "pss" and task["type"] in ("ps", "worker"):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                             protocol="grpc", start=True).join()
        return
    x, y, hidden, batch = workload(name)
    call = None
    if kind == "mwms":
        result, call = mwms(x, y, hidden, batch, steps, per_schedule)
    else:
        result = pss(x, y, hidden, batch, steps, per_schedule)
    lead = task["type"] == "chief" or task["index"] == 0
    if lead:
        print(json.dumps(dict(result, started=T_START)), flush=True)
    if serve and call is not None:
        bursts(call, per_schedule, lead)


if __name__ == "__main__":
    main()
