"""BatchNormalization under parameter servers: a small CNN on digits (Conv2D,
BatchNormalization, Dropout; Adam with an exponentially decaying learning rate; 400 steps,
global batch 64) trained by the workbench under single, MWMS (2 workers) and PSS (1 PS + 2
workers), and by TensorFlow's own parameter-server loop as its tutorial writes it (the
peer: one step per scheduled function, 1 PS + 2 workers, and 1 worker as its control).
Not a speed benchmark (not in run_all.py): what each one ends with.

    python bench/batchnorm.py                 # seeds 0-2: ~4 minutes on 2 cores
    python bench/batchnorm.py --seeds 0       # one seed

Per run: test loss and accuracy of the final model in inference mode, the mean of
BatchNormalization's moving variance (it starts at 1.0 and keeps 0.99**k of that after k
updates: 0.018 after 400, 0.049 after 300, so lost updates leave it high) and how many
updates the optimizer counted (its learning-rate schedule follows that count). Every step
updates both once: under single they end at 400. Results go to bench/results/batchnorm.json.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ipyparallel as ipp  # noqa: E402
import peer  # noqa: E402

import workbench as wb  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
STEPS, BATCH = 400, 64
TOPOLOGIES = {"single": dict(strategy="single", workers=1),
              "MWMS, 2 workers": dict(strategy="multi_worker_mirrored", workers=2),
              "PSS, 1 PS + 2 workers": dict(strategy="parameter_server", workers=2, ps=1)}


@ipp.interactive
def cnn():
    import keras

    return keras.Sequential([
        keras.Input((64,)), keras.layers.Reshape((8, 8, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.BatchNormalization(), keras.layers.MaxPooling2D(), keras.layers.Flatten(),
        keras.layers.Dropout(0.5), keras.layers.Dense(10, activation="softmax"),
    ])


def optimizer():
    import keras

    return keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=100, decay_rate=0.5))


@ipp.interactive
def counted(directory):
    """On an engine: the optimizer's update count in the latest checkpoint under ``directory``."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(directory)
    return int(reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"))


def workbench(cluster, seed):
    digits = wb.datasets.digits()
    for name, topology in TOPOLOGIES.items():
        run = cluster.train(cnn, digits, eval_data=digits, optimizer=optimizer(), loss="sparse_categorical_crossentropy",
                            global_batch_size=BATCH, steps=STEPS, seed=seed, checkpoint_every=0, **topology)
        run.wait(timeout=600)
        engine = cluster.client[run.tasks[0].engine_id]
        yield name, dict(test_loss=run.evaluation["test_loss"], test_accuracy=run.evaluation["test_accuracy"],
                         moving_variance=float(run.weights()[5].mean()),
                         counted=engine.apply_sync(counted, str(run.run_dir / "checkpoints")))


def peer_task(seed):
    """One task of the peer (TF_CONFIG says which): PS and workers serve; the chief trains with
    TF's parameter-server tutorial's loop and prints its result as one JSON line."""
    import keras
    import numpy as np
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                             protocol="grpc", start=True).join()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model, opt = cnn(), optimizer()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction="none")
    d = wb.datasets.digits()

    def dataset_fn(_):
        ds = tf.data.Dataset.from_tensor_slices((d.x_train, d.y_train)).shuffle(len(d.x_train), seed=seed)
        return ds.repeat().batch(BATCH).prefetch(2)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    def step_fn(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(iterator):
        return strategy.run(step_fn, args=(next(iterator),))

    for _ in range(STEPS):
        coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()
    p = model(d.x_test, training=False).numpy()
    print(json.dumps(dict(test_loss=float(-np.mean(np.log(p[np.arange(len(p)), d.y_test] + 1e-7))),
                          test_accuracy=float(np.mean(p.argmax(1) == d.y_test)),
                          moving_variance=float(model.get_weights()[5].mean()), counted=int(opt.iterations.numpy()))),
          flush=True)
    os._exit(0)  # the result is out; the coordinator's threads need not wind down


def peer_run(seed, workers):
    """The peer launched by hand (chief, 1 PS, ``workers`` workers on loopback), ended by PID."""
    roles = {"chief": 1, "ps": 1, "worker": workers}
    ports = iter(peer.free_ports(sum(roles.values())))
    cluster = {role: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for role, n in roles.items()}
    procs = []
    try:
        for role, n in roles.items():
            for i in range(n):
                env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": role, "index": i}}),
                           TF_CPP_MIN_LOG_LEVEL="2", GRPC_FAIL_FAST="use_caller", CUDA_VISIBLE_DEVICES="")
                procs.append(subprocess.Popen([sys.executable, __file__, "--task", str(seed)], env=env, text=True,
                                              stdout=subprocess.PIPE if role == "chief" else subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL))
        out, _ = procs[0].communicate(timeout=600)
        return json.loads(out.strip().splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--task", type=int, help=argparse.SUPPRESS)  # one of the peer's processes
    args = ap.parse_args()
    if args.task is not None:
        return peer_task(args.task)
    results = {}
    with wb.Cluster(engines=4) as cluster:
        for seed in (int(s) for s in args.seeds.split(",")):
            rows = dict(workbench(cluster, seed))
            for workers in (2, 1):
                rows[f"TF's own PSS loop, 1 PS + {workers} worker{'s' * (workers > 1)}"] = peer_run(seed, workers)
            for name, row in rows.items():
                print(f"seed {seed}  {name:38s} test loss {row['test_loss']:.3f}  accuracy {row['test_accuracy']:.3f}  "
                      f"moving variance {row['moving_variance']:.4f}  counted {row['counted']}/{STEPS}", flush=True)
            results[seed] = rows
    OUT.mkdir(exist_ok=True)
    (OUT / "batchnorm.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
