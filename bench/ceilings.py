"""Hardware ceilings: how close the workbench gets to what this machine and TensorFlow can
do, each figure a ratio of two things measured in this run, alternated.

    python bench/ceilings.py           # full: ~4 minutes on 2 cores
    python bench/ceilings.py --quick   # smoke: small sizes, one repeat

- compute: training FLOP/s of a single-worker workbench run (dense 1024-4096-4096-10,
  batch 512) over this machine's large-matmul FLOP/s (4096 x 4096, float32), and over a
  plain TF training loop of the same model in this process;
- all-reduce: bytes/s of an MWMS step's gradient synchronisation (Keras's optimizer calls
  ``all_reduce(SUM, grads)`` on the list of per-variable gradients) over TF's all-reduce
  of one packed tensor of the same size, on the same two engines, and over loopback TCP.

FLOPs per step are counted from the model: forward 2*B*P, weight gradients 2*B*P, input
gradients 2*B*(P - P1) (none for the data), with P the weights of all dense kernels and P1
the first one's; biases, activations and the optimizer are left out (under 0.1%).

Results go to bench/results/ceilings.json and .md.
"""

import argparse
import json
import math
import socket
import threading
import time

from shared import OUT, machine, steady, summary

import workbench as wb  # noqa: E402


def flops_per_step(features, hidden, classes, batch):
    sizes = [features, *hidden, classes]
    kernels = [a * b for a, b in zip(sizes, sizes[1:])]
    return 2 * batch * (3 * sum(kernels) - kernels[0])


def matmul_flops(n, reps):
    """FLOP/s of an n x n float32 matmul in this process, TensorFlow's defaults."""
    import tensorflow as tf

    a, b = tf.random.normal([n, n]), tf.random.normal([n, n])
    mm = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    mm().numpy()
    t = time.perf_counter()
    for _ in range(reps):
        mm().numpy()
    return 2 * n**3 * reps / (time.perf_counter() - t)


def plain_loop(features, hidden, classes, batch, steps):
    """Steps/s of a plain TF loop (tf.function step, SGD) on the same model in this process."""
    import keras
    import tensorflow as tf

    model = keras.Sequential([keras.Input((features,)), *[keras.layers.Dense(h, activation="relu") for h in hidden],
                              keras.layers.Dense(classes)])
    opt = keras.optimizers.SGD(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = tf.random.normal([batch, features])
    y = tf.random.uniform([batch], maxval=classes, dtype=tf.int32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    for _ in range(3):
        step().numpy()
    t = time.perf_counter()
    for _ in range(steps):
        step().numpy()
    return steps / (time.perf_counter() - t)


def allreduce_rates(shapes, iters, rounds, barrier):
    """On each MWMS worker engine at once: bytes/s of all_reduce(SUM) over the gradient list
    (one tensor per variable, as Keras's optimizer does) and over one packed tensor of the
    same size, alternated ``rounds`` times (``barrier``: a name new for this call, the same
    on each engine)."""
    import time

    import numpy as np
    import tensorflow as tf

    from workbench.engine.strategies.multi_worker_mirrored import collective_strategy

    # same TF_CONFIG and ports as the run before; built by every worker before any collective
    strategy = collective_strategy(barrier)
    per_variable = [tf.ones(s) for s in shapes]
    size = sum(int(np.prod(s)) for s in shapes)
    packed = [tf.ones([size])]

    def timed(values):
        @tf.function
        def once():
            def fn():
                out = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, values)
                return tf.reshape(out[0], [-1])[0]
            return strategy.run(fn)

        once().numpy()
        t = time.perf_counter()
        for _ in range(iters):
            once().numpy()
        return 4 * size * iters / (time.perf_counter() - t)

    return [(timed(per_variable), timed(packed)) for _ in range(rounds)]


def loopback_bytes_per_s(total, chunk=1 << 20):
    """TCP bandwidth over 127.0.0.1: one thread sends ``total`` bytes, another receives."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = []

    def receive():
        conn, _ = server.accept()
        view, n = memoryview(bytearray(chunk)), 0
        with conn:
            while n < total:
                k = conn.recv_into(view)
                if not k:
                    break
                n += k
        received.append(n)

    thread = threading.Thread(target=receive)
    thread.start()
    data = bytes(chunk)
    with socket.create_connection(("127.0.0.1", port)) as client:
        t = time.perf_counter()
        for _ in range(total // chunk):
            client.sendall(data)
        client.shutdown(socket.SHUT_WR)
        thread.join()
        dt = time.perf_counter() - t
    server.close()
    return received[0] / dt


def compute(quick, repeats):
    features, hidden, classes, batch = (256, (1024, 1024), 10, 128) if quick else (1024, (4096, 4096), 10, 512)
    steps, n = (60, 1024) if quick else (40, 4096)  # enough chunks for figures.py to time (MIN_ENDS)
    per_step = flops_per_step(features, hidden, classes, batch)
    data = wb.datasets.synthetic(examples=batch * 8, features=features, classes=classes)
    ours, plain, machine = [], [], []
    with wb.Cluster(engines=1) as cluster:
        for _ in range(repeats):  # alternated: matmul, workbench, plain loop, ...
            machine.append(matmul_flops(n, reps=10 if quick else 20))
            run = cluster.train(wb.models.mlp(hidden), data, strategy="single", workers=1, global_batch_size=batch,
                                steps=steps, checkpoint_every=0, dashboard=False, learning_rate=0.01)
            run.wait()
            ours.append(steady(run) * per_step)
            plain.append(plain_loop(features, hidden, classes, batch, steps // 2) * per_step)
    return {
        "model": f"dense {features}-{'-'.join(map(str, hidden))}-{classes}, batch {batch}",
        "FLOPs per step": per_step,
        "matmul": f"{n} x {n} float32",
        "machine matmul GFLOP/s": summary([m / 1e9 for m in machine]),
        "workbench training GFLOP/s": summary([o / 1e9 for o in ours]),
        "plain TF loop GFLOP/s": summary([p / 1e9 for p in plain]),
        "workbench / matmul": summary([o / m for o, m in zip(ours, machine)]),
        "plain TF loop / matmul": summary([p / m for p, m in zip(plain, machine)]),
        "workbench / plain TF loop": summary([o / p for o, p in zip(ours, plain)]),
    }


def allreduce(quick, repeats):
    features, hidden, classes = 784, (512,), 10
    sizes = [features, *hidden, classes]
    shapes = [s for a, b in zip(sizes, sizes[1:]) for s in ((a, b), (b,))]  # kernel, bias per layer, as Keras makes them
    data = wb.datasets.synthetic(examples=2048, features=features, classes=classes)
    with wb.Cluster(engines=2) as cluster:
        # a real MWMS run first: it sets TF_CONFIG and the collective runtime on the engines
        run = cluster.train(wb.models.mlp(hidden), data, strategy="multi_worker_mirrored", workers=2,
                            global_batch_size=512, steps=20, checkpoint_every=0, dashboard=False)
        run.wait()
        ids = [t.engine_id for t in run.tasks]
        rates = cluster.client[ids].apply_async(allreduce_rates, shapes, 20 if quick else 200,
                                                repeats, f"{run.id}-ceilings").get(timeout=600)
    pairs = rates[0]  # both workers time the same collectives; worker 0's figures
    loopback = [loopback_bytes_per_s((64 if quick else 1024) << 20) for _ in range(repeats)]
    size = 4 * sum(math.prod(s) for s in shapes)
    return {
        "gradients": f"wide MLP {'-'.join(map(str, sizes))}: {len(shapes)} tensors, {size} bytes",
        "per-variable all-reduce MB/s": summary([p / 1e6 for p, _ in pairs]),
        "packed all-reduce MB/s": summary([q / 1e6 for _, q in pairs]),
        "loopback TCP MB/s": summary([b / 1e6 for b in loopback]),
        "per-variable / packed": summary([p / q for p, q in pairs]),
        "packed / loopback": summary([q / b for (_, q), b in zip(pairs, loopback)]),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=None)
    args = p.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    t0 = time.time()
    results = {"compute": compute(args.quick, repeats), "all-reduce": allreduce(args.quick, repeats)}
    meta = {"machine": machine(), "quick": args.quick, "repeats": repeats, "seconds": round(time.time() - t0, 1)}
    OUT.mkdir(exist_ok=True)
    (OUT / "ceilings.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    lines = ["| figure | median [min-max] |", "| --- | --- |"]
    for part, rows in results.items():
        for name, v in rows.items():
            if isinstance(v, dict):
                lines.append(f"| {part}: {name} | {v['median']:.3g} [{v['min']:.3g}-{v['max']:.3g}] |")
            else:
                lines.append(f"| {part}: {name} | {v} |")
    (OUT / "ceilings.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
