"""A simulated run of many workers for the kernel's real code paths, no engine, no TF.

A generator process stands in for the engines: every worker makes a step row in the real
format (``engine/loop.py``'s ``pub.add``) at ``rate`` steps/s and publishes the window
``engine/metrics.py`` publishes, 5 times a second, pickled (what ipyparallel's
``publish_data`` sends). In the kernel process a receiver thread stands in for the
ipyparallel client's IO thread: it unpickles each publish and updates the task's
``AsyncResult.data`` in place, as the client does. The rest is the workbench's own:
``Run`` (its watcher merging rows into ``history``), ``Dashboard`` (redrawing at 4 Hz),
``Run.placement``.
"""

import multiprocessing as mp
import os
import pickle
import random
import shutil
import tempfile
import threading
import time

from shared import thread_cpu
from workbench.common.job import Job
from workbench.common.roles import Task
from workbench.engine import metrics

FLUSH_EVERY = 0.2  # engine/metrics.py Publisher.interval


def row(worker, step, rng):
    """A step row as an MWMS worker publishes it (the keys of loop.py's ``pub.add``)."""
    loss = 2.3 * 0.999 ** step + 0.05 * rng.random()
    dt = 0.1 * (1 + 0.1 * rng.random())
    return {"step": step, "worker": worker, "loss": loss, "accuracy": min(1.0, 0.1 + step / 2000),
            "step_time": dt, "examples_per_s": 64 / dt, "replicas": 1, "time": time.time()}


def window(rows, marks, size=2048, flushes=None):
    """What a publish carries: engine/metrics.py's window (the old one: the last ``size`` rows)."""
    flushes = metrics.WINDOW_FLUSHES if flushes is None else flushes
    marks.append(len(rows))
    del marks[:-flushes]
    start = marks[0] if flushes and len(marks) == flushes else 0
    return rows[max(start, len(rows) - size):]


def _engines(conn, workers, rate, seconds, old_window, seed):
    """The generator process: every worker steps at ``rate`` and publishes every 0.2 s
    (phases spread over the interval); each publish is sent pickled, one message per tick."""
    rng = random.Random(seed)
    names = [f"worker:{i}" for i in range(workers)]
    rows = {n: [] for n in names}
    marks = {n: [] for n in names}
    phase = {n: rng.random() * FLUSH_EVERY for n in names}
    step_every = 1.0 / rate
    t0 = time.time()
    next_step = {n: t0 + rng.random() * step_every for n in names}
    last_flush = {n: t0 + phase[n] - FLUSH_EVERY for n in names}
    tick = 0.02
    while time.time() - t0 < seconds:
        now = time.time()
        out = []
        for n in names:
            while next_step[n] <= now:
                rows[n].append(row(n, len(rows[n]) + 1, rng))
                next_step[n] += step_every
            if now - last_flush[n] >= FLUSH_EVERY:
                last_flush[n] = now
                w = window(rows[n], marks[n], flushes=0 if old_window else None)
                out.append((n, pickle.dumps({"packed": metrics.pack(w), "events": [], "n": len(rows[n])}, protocol=5)))
        if out:
            conn.send_bytes(pickle.dumps(out, protocol=5))
        time.sleep(max(0.0, tick - (time.time() - now)))
    conn.send_bytes(b"")
    conn.send(sum(len(r) for r in rows.values()))


class FakeResult:
    """An ipyparallel AsyncResult as the watcher uses it: ``data`` updated in place."""

    def __init__(self):
        self.data = {}
        self._done = threading.Event()

    def ready(self):
        return self._done.is_set()

    def wait(self, timeout=None):
        return self._done.wait(timeout)

    def get(self):
        return {"rows": [], "events": [], "final_step": 0, "stopped": True}

    def wait_for_output(self, timeout=None):
        """Its last publishes came with its rows: nothing to wait for."""
        return True

    def finish(self):
        """The simulated task returns (stopped): the watcher collects it."""
        self._done.set()


class FakePool:
    """What a ``Run`` asks of its cluster's engine pool: every simulated engine is alive, has
    no process of its own and no debug thread (its stacks read as "no debug thread known")."""

    info: dict = {}

    def alive(self, engine_id):
        return True

    def debug_channel(self, engine_id):
        return None

    def is_local(self, engine_id):
        return False

    def condemn(self, ids, kill=()):
        pass

    def heal(self):
        pass


class FakeCluster:
    """The cluster side of a ``Run`` of simulated workers: no engines behind it."""

    def __init__(self, ids):
        self.client = type("Client", (), {"ids": list(ids)})()
        self.engine_info = {}
        self.pool = FakePool()


def make_run(workers, run_dir, strategy="multi_worker_mirrored"):
    from workbench.kernel.runs.handle import Run

    tasks = [Task(engine_id=i, role="worker", index=i, host="sim", target="") for i in range(workers)]
    job = Job(run_id=os.path.basename(run_dir), run_dir=run_dir, strategy=strategy, model=None, data=None,
              loss="sparse_categorical_crossentropy", optimizer="sgd", learning_rate=0.1, momentum=0.0,
              global_batch_size=64 * workers, steps=10**9, seed=0, workers=workers, ps=0, steps_per_execution=1,
              checkpoint_every=0, eval_every=0, stop_check_every=10, tasks=tasks,
              loss_name="sparse_categorical_crossentropy")
    results = {t.name: FakeResult() for t in tasks}
    return Run(FakeCluster(range(workers)), job, tasks, results, stall_timeout=10**6, start_timeout=10**6)


def placement_event(ps=4, variables=400, workers=8):
    """A parameter-server run's placement event: its tasks and ``variables`` variables round-robin over
    the PS tasks, half of them optimizer state."""
    tasks = [{"role": "chief", "task": 0, "engine": 0, "host": "sim", "pid": 1, "devices": ["/device:CPU:0"]}]
    tasks += [{"role": "ps", "task": i, "engine": 1 + i, "host": "sim", "pid": 2 + i, "devices": ["/device:CPU:0"]}
              for i in range(ps)]
    tasks += [{"role": "worker", "task": i, "engine": 1 + ps + i, "host": "sim", "pid": 2 + ps + i,
               "devices": ["/device:CPU:0"]} for i in range(workers)]
    vs = [{"variable": f"dense_{i // 2}/{'kernel' if i % 2 == 0 else 'bias'}" + ("/momentum" if i >= variables // 2 else ""),
           "device": f"/job:ps/replica:0/task:{i % ps}/device:CPU:0", "shape": [64, 64], "bytes": 16384,
           "kind": "optimizer" if i >= variables // 2 else "model"} for i in range(variables)]
    return {"kind": "placement", "time": time.time(), "tasks": tasks, "variables": vs}


def simulate(workers, seconds=10.0, rate=10.0, old_window=False, dashboard=True, seed=0):
    """One simulated run: returns the kernel's CPU per thread (fraction of one core), the
    metrics latency (row made -> in the widget's model), rows offered and merged."""
    run_dir = tempfile.mkdtemp(prefix="wb-sim-")
    try:
        return _simulate(run_dir, workers, seconds, rate, old_window, dashboard, seed)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _simulate(run_dir, workers, seconds, rate, old_window, dashboard, seed):
    import statistics

    run = make_run(workers, run_dir)
    results = run.results
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_engines, args=(child, workers, rate, seconds, old_window, seed), daemon=True)
    received = {"messages": 0}

    def receive():  # the ipyparallel client's IO thread: unpickle, update AsyncResult.data in place
        while True:
            blob = parent.recv_bytes()
            if not blob:
                received["cpu"] = thread_cpu(threading.current_thread())  # before the thread ends
                return
            for name, payload in pickle.loads(blob):
                results[name].data.update(pickle.loads(payload))
                received["messages"] += 1

    io = threading.Thread(target=receive, name="sim-client-io", daemon=True)
    dash = run.dashboard(interval=0.25) if dashboard else None
    proc.start()
    io.start()
    threads = {"watcher": run.watcher.thread, "client IO": io}
    if dash is not None:
        threads["dashboard"] = dash._thread
    skip = 2.0 if seconds > 4 else 0.5  # warm-up: the generator process starting
    time.sleep(skip)
    cpu0 = {k: thread_cpu(t) for k, t in threads.items()}
    lat0 = len(dash.latencies) if dash else 0
    t0 = time.monotonic()
    io.join(seconds + 60)
    span = time.monotonic() - t0
    cpu = {k: ((received["cpu"] if t is io else thread_cpu(t)) - cpu0[k]) / span for k, t in threads.items()}
    offered = parent.recv()
    proc.join(10)
    merged = run.log.rows
    lat = dash.latencies[lat0:] if dash else []
    t = time.perf_counter()
    h = run.history
    history_s = time.perf_counter() - t
    run.log.merge({"events": [placement_event()]})
    t = time.perf_counter()
    placement = run.placement
    placement_s = time.perf_counter() - t
    for r in results.values():
        r.finish()
    run.join(30)
    if dash is not None:
        dash._thread.join(10)
    return {
        "workers": workers, "steps_per_s_each": rate, "seconds": seconds, "old_window": old_window,
        "cpu_core_fraction": cpu, "messages": received["messages"], "rows_offered": offered, "rows_merged": merged, "rows_in_history": len(h),
        "latency_s_median": statistics.median(lat) if lat else None,
        "latency_s_p90": sorted(lat)[int(0.9 * (len(lat) - 1))] if lat else None,
        "dashboard_updates": len(lat), "history_build_s": history_s, "placement_rows": len(placement),
        "placement_s": placement_s,
    }
