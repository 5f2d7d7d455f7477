"""Is a zygote start safe and worth it here? N processes to their first MWMS step, started
today's way (each process imports TensorFlow) against forked from one process that
imported TensorFlow once, alternated in the same run. Not the workbench's engines: the
same TF work (import, MWMS over N workers on loopback, a Keras model, one step) in bare
processes, to decide whether the engine launcher should fork.

    OPENBLAS_NUM_THREADS=1 python bench/zygote_probe.py [--workers 4] [--pairs 2]

Fork safety is checked, not assumed: the zygote counts its threads (/proc/self/task) just
before forking and refuses to fork if there is more than one. numpy's OpenBLAS starts a
thread pool at import (2 extra threads after ``import tensorflow`` here) unless
``OPENBLAS_NUM_THREADS=1``; TensorFlow's import starts none of its own. Results:
bench/results/zygote_probe.json.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, time
t0 = float(sys.argv[1])
import tensorflow as tf, keras
def step(i, workers, t0):
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})
    st = tf.distribute.MultiWorkerMirroredStrategy()
    with st.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)])
        opt = keras.optimizers.SGD(0.1)
    x = tf.random.uniform((256, 64), seed=1); y = tf.random.uniform((256,), maxval=10, dtype=tf.int64, seed=2)
    it = iter(st.distribute_datasets_from_function(
        lambda ctx: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)))
    @tf.function
    def train(batch):
        def f(b):
            xb, yb = b
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(yb, model(xb), from_logits=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return st.reduce("MEAN", st.run(f, args=(batch,)), axis=None)
    loss = float(train(next(it)))
    first = time.time() - t0
    for _ in range(20):
        loss = float(train(next(it)))
    return {"first_step_s": first, "loss_after_21": loss, "threads": len(os.listdir("/proc/self/task"))}
"""


def ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    out = [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    for s in socks:
        s.close()
    return out


def today(n):
    """N processes, each importing TF (as each engine does today)."""
    workers, t0 = ports(n), time.time()
    code = CHILD + "\nprint(json.dumps(step(int(sys.argv[2]), json.loads(sys.argv[3]), t0)))"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(t0), str(i), json.dumps(workers)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(n)]
    out = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    return {"all_first_step_s": max(o["first_step_s"] for o in out), "children": out}


def zygote(n):
    """One process imports TF, checks it has one thread, forks N children."""
    workers, t0 = ports(n), time.time()
    code = CHILD + r"""
n, workers = int(sys.argv[2]), json.loads(sys.argv[3])
threads = len(os.listdir("/proc/self/task"))
if threads != 1:
    print(json.dumps({"refused": f"{threads} threads at fork time"})); sys.exit(0)
import_s = time.time() - t0
pids = []
for i in range(n):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = step(i, workers, t0)
        except BaseException as e:
            res = {"error": repr(e)[:300]}
        os.write(w, json.dumps(res).encode()); os._exit(0)
    os.close(w)
    pids.append((pid, r))
out = []
for pid, r in pids:
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    out.append(json.loads(data or b'{"error": "no result"}'))
print(json.dumps({"threads_at_fork": threads, "import_s": import_s, "children": out}))
"""
    p = subprocess.run([sys.executable, "-c", code, str(t0), str(n), json.dumps(workers)],
                       capture_output=True, text=True, timeout=300)
    res = json.loads(p.stdout.strip().splitlines()[-1])
    if "children" in res and all("first_step_s" in c for c in res["children"]):
        res["all_first_step_s"] = max(c["first_step_s"] for c in res["children"])
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--pairs", type=int, default=2)
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    rows = []
    for i in range(args.pairs):
        for kind, fn in (("today", today), ("zygote", zygote)) if i % 2 == 0 else (("zygote", zygote), ("today", today)):
            r = dict(fn(args.workers), kind=kind)
            print(json.dumps({k: v for k, v in r.items() if k != "children"}), flush=True)
            rows.append(r)
    out = {"workers": args.workers, "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "rows": rows}
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, "zygote_probe.json"), "w") as f:
        json.dump(out, f, indent=1)
    for kind in ("today", "zygote"):
        ts = sorted(r["all_first_step_s"] for r in rows if r["kind"] == kind and "all_first_step_s" in r)
        print(f"{kind}: {args.workers} processes to all first MWMS steps: {ts}")


if __name__ == "__main__":
    main()
