"""Inside a step: the anatomy of every step (input, compute, communication, waiting) per
worker, cross-checked against TF's own profiler trace; run.profile(); 32/16/8-bit gradient
communication (bytes exact, accuracy within a band of 32-bit)."""

import ipyparallel as ipp
import pandas as pd
import pytest

import workbench as wb
from checks import wait_for
from workbench.common import anatomy
from workbench.errors import ConfigError
from workbench.kernel.runs.job import make_job

DIGITS = wb.datasets.digits()
MLP = wb.models.mlp((64, 32))
PARAMS = 64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10
TENSORS = 6
GOOD = dict(model=MLP, data=DIGITS, loss="sparse_categorical_crossentropy", optimizer="sgd",
            learning_rate=0.1, momentum=0.0, strategy="multi_worker_mirrored", workers=2, ps=0,
            global_batch_size=64, steps=10, seed=0, steps_per_execution=None, checkpoint_every=0,
            eval_every=0, variable_partitioner=None, devices=0)


def _rows(worker, busy, comm, steps=20):
    return [dict(step=s, worker=worker, step_time=0.010, input_time=0.001, compute_time=busy,
                 comm_time=comm, comm_bytes=100) for s in range(1, steps + 1)]


def test_shares_sum_to_one_and_the_last_to_arrive_defines_the_transfer():
    # worker:1 computes 3 ms longer; worker:0 waits those 3 ms inside the all-reduce
    h = pd.DataFrame(_rows("worker:0", 0.004, 0.005) + _rows("worker:1", 0.007, 0.002))
    t = anatomy.table(h).set_index("worker")
    assert t[list(anatomy.PARTS)].sum(axis=1).round(9).eq(1).all()
    assert t.loc["worker:0", "communication"] == pytest.approx(0.2)  # 2 ms of 10
    assert t.loc["worker:0", "waiting"] == pytest.approx(0.3)
    assert t.loc["worker:1", "waiting"] == 0
    assert t.loc["worker:1", "busy"] == pytest.approx(0.010)
    assert t.loc["worker:0", "busy"] == pytest.approx(0.007)
    assert list(t.straggler) == [False, True]  # 10 ms busy > 1.2 x 7 ms


def test_the_dashboard_draws_a_bar_per_worker_and_names_the_straggler():
    from workbench.kernel.views import render

    h = pd.DataFrame(_rows("worker:0", 0.004, 0.005) + _rows("worker:1", 0.007, 0.002))
    out = render.anatomy_html(anatomy.table(h))
    assert out.count('class="wb-anatomy-row"') == 2
    assert "Straggler: <b>worker:1</b> is busy 43% longer" in out  # 10 ms vs 7 ms
    assert "100 B/step sent" in out
    # the all-reduce's bytes per step, its precision, and the rate at the mean step time (10 ms)
    assert "All-reduce: <b>100 B/step</b> per worker (float32), 0.01 MB/s per worker" in out
    assert "(fp16)" in render.anatomy_html(anatomy.table(h), compression="fp16")
    no_bytes = pd.DataFrame(_rows("worker:0", 0.004, 0.0)).assign(comm_bytes=0)
    assert "All-reduce" not in render.anatomy_html(anatomy.table(no_bytes))  # single, PS: nothing sent
    assert render.anatomy_html(anatomy.table(pd.DataFrame())) == ""
    # a run without the anatomy still has its bytes per worker, and nothing when none were sent
    untimed = h[["step", "worker", "step_time", "comm_bytes"]]
    got = anatomy.sent(untimed)
    assert list(got.worker) == ["worker:0", "worker:1"] and list(got.bytes_per_step) == [100, 100]
    assert list(got.step_time) == pytest.approx([0.01, 0.01])
    assert anatomy.sent(untimed.assign(comm_bytes=0)).empty and anatomy.sent(untimed.drop(columns="comm_bytes")).empty


def test_no_straggler_within_twenty_percent():
    h = pd.DataFrame(_rows("worker:0", 0.005, 0.004) + _rows("worker:1", 0.006, 0.003))
    assert not anatomy.table(h).straggler.any()
    assert anatomy.straggler(pd.Series({"a": 1.0})) is None


def _pandas_per_step(history):
    """Seconds per (worker, step) in each part, from the rows' columns; the history's rows
    with anatomy only (anatomy.per_step before 2026-11-24, in pandas: the reference)."""
    import numpy as np

    h = history.dropna(subset=["compute_time"]).copy()
    if h.empty:
        return h.assign(**{p: [] for p in anatomy.PARTS})
    if "wait_time" in h and h["wait_time"].notna().any():  # parameter server: idle between calls
        comm = h["comm_time"]
        waiting = h["wait_time"].fillna(0.0)
    else:
        transfer = h.groupby("step")["comm_time"].transform("min")
        comm, waiting = transfer, h["comm_time"] - transfer
    h["input"] = h["input_time"]
    h["compute"] = h["compute_time"]
    h["communication"] = comm
    h["waiting"] = waiting
    wall = np.maximum(h["step_time"], h[["input", "compute", "communication", "waiting"]].sum(axis=1))
    h["other"] = wall - h[["input", "compute", "communication", "waiting"]].sum(axis=1)
    h["wall"] = wall
    return h


def _pandas_table(history, skip=0):
    """anatomy.table as pandas groupbys computed it (before 2026-11-24): the reference."""
    import pandas as pd

    cols = ["worker", "steps", "step_time", *anatomy.PARTS, "bytes_per_step", "busy", "straggler"]
    if history is None or not len(history) or not anatomy.has_anatomy(history):
        return pd.DataFrame(columns=cols)
    h = _pandas_per_step(history[history.step > skip])
    if h.empty:
        return pd.DataFrame(columns=cols)
    g = h.groupby("worker")
    sums = g[list(anatomy.PARTS) + ["wall"]].sum()
    out = pd.DataFrame({"steps": g.size(), "step_time": sums["wall"] / g.size()})
    for p in anatomy.PARTS:
        out[p] = sums[p] / sums["wall"]
    out["bytes_per_step"] = g["comm_bytes"].mean() if "comm_bytes" in h else 0.0
    out["busy"] = (sums["wall"] - sums["waiting"]) / g.size()
    out["straggler"] = False
    slow = anatomy.straggler(out["busy"])
    if slow is not None:
        out.loc[slow, "straggler"] = True
    return out.reset_index()[cols]


@pytest.mark.parametrize("seed", range(6))
def test_the_numpy_table_gives_the_pandas_tables_numbers(seed):
    """anatomy.table and per_step (numpy; the dashboard rebuilds the table every second)
    against the pandas code they replaced: workers that miss steps, NaN timers, bytes,
    parameter-server waits."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for w in range(1 + seed % 4):
        for s in range(1, 200):
            if rng.random() < 0.1:
                continue  # a step this worker has not reported
            rows.append(dict(step=s, worker=f"worker:{w}", step_time=rng.uniform(1e-3, 3e-3),
                             input_time=rng.choice([np.nan, rng.uniform(0, 1e-4)]),
                             compute_time=rng.choice([np.nan, rng.uniform(5e-4, 2e-3)], p=[0.05, 0.95]),
                             comm_time=rng.choice([np.nan, rng.uniform(0, 1e-3)], p=[0.05, 0.95]),
                             comm_bytes=rng.choice([np.nan, 1000.0], p=[0.1, 0.9])))
    h = pd.DataFrame(rows)
    cases = [h, h.drop(columns="comm_bytes"), h.assign(wait_time=rng.uniform(0, 1e-3, len(h)))]
    for case in cases:
        for skip in (0, 20, 10_000):
            want, got = _pandas_table(case, skip), anatomy.table(case, skip)
            pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)
        pd.testing.assert_frame_equal(anatomy.per_step(case), _pandas_per_step(case), check_dtype=False, rtol=1e-12)


def test_runs_without_anatomy_give_an_empty_table():
    h = pd.DataFrame([dict(step=1, worker="worker:0", step_time=0.01)])
    assert anatomy.table(h).empty and list(anatomy.table(h).columns)[0] == "worker"


@pytest.mark.parametrize("strategy", ["parameter_server", "single", "mirrored"])
def test_compression_is_refused_where_there_is_no_all_reduce(strategy):
    args = dict(GOOD, strategy=strategy, workers=1, compression="fp16")
    if strategy == "parameter_server":
        args.update(workers=2, ps=1)
    with pytest.raises(ConfigError, match=r"Invalid value for argument 'compression'. Received: "
                                          rf"compression='fp16'. Expected None with strategy='{strategy}'"):
        make_job(None, **args)  # no cluster: refused before any engine is asked for


def test_unknown_compression_suggests_the_closest():
    with pytest.raises(ConfigError, match="Did you mean 'fp16'"):
        make_job(None, **dict(GOOD, compression="fp61"))
    assert make_job(None, **dict(GOOD, compression="int8")).compression == "int8"


def test_the_trace_summary_counts_op_time_once_inside_the_training_calls():
    """engine/profile.py reads an XPlane (TF's trace format, built here by hand): op events
    ("name:Type") by category, concurrent ops counted once, executor bookkeeping ("::")
    and whatever ran outside the training function's calls (the stop agreement's
    collective) left out, an op straddling a call's end clipped to it."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from workbench.engine import profile

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    names = ["run_steps", "mlp/MatMul:_MklMatMul", "mlp/Relu:Relu", "ExecutorState::Process",
             "CollectiveReduceV2:CollectiveReduceV2", "IteratorGetNextOp::DoCompute"]
    for i, name in enumerate(names, 1):
        plane.event_metadata[i].name = name
    us = 1_000_000  # picoseconds

    def line(name, *events):
        new = plane.lines.add(name=name, timestamp_ns=0)
        for meta, begin, length in events:
            new.events.add(metadata_id=meta, offset_ps=begin * us, duration_ps=length * us)

    line("python", (1, 0, 100))  # one call: 0-100 us
    line("tf_Compute/1", (2, 10, 20), (4, 0, 95), (3, 90, 30))  # MatMul 10-30; Relu 90-120, clipped to 90-100
    line("tf_Compute/2", (3, 20, 20))  # Relu 20-40 overlaps MatMul: compute is 10-40 + 90-100
    line("collective_ops/1", (5, 40, 45), (5, 150, 10))  # the second one ran after the call
    line("tf_data_iterator_get_next/1", (6, 2, 5))
    spans, ops = profile.intervals(space)
    assert ops == 5
    assert profile._union(spans["compute"]) == 40 * us
    assert profile._union(spans["communication"]) == 45 * us
    assert profile._union(spans["input"]) == 5 * us


# -- on a real cluster -------------------------------------------------------------------

TOPOLOGIES = {
    "single": dict(strategy="single", workers=1, ps=0),
    "multi_worker_mirrored": dict(strategy="multi_worker_mirrored", workers=2, ps=0),
    "parameter_averaging": dict(strategy="parameter_averaging", workers=2, ps=0),
    "parameter_server": dict(strategy="parameter_server", workers=2, ps=1),
}
# one engine, two logical CPU devices: one replica on each (profiled, not in every test)
PROFILED = dict(TOPOLOGIES, mirrored=dict(strategy="mirrored", workers=1, ps=0, devices=2))


@ipp.interactive
def _gated_in_a_trace():
    """On an engine: step.gated on a dense gradient, a sparse one (IndexedSlices, as an
    embedding's), None and another dense one, traced; what came out and the ops it made."""
    import tensorflow as tf

    from workbench.engine import step

    seen = {}

    @tf.function
    def f():
        sparse = tf.IndexedSlices(tf.ones([2, 4]), tf.constant([1, 3]), tf.constant([10, 4]))
        graph = tf.compat.v1.get_default_graph()
        first = len(graph.get_operations())
        out = step.gated([tf.ones([3]), sparse, None, tf.zeros([2])])
        seen["kinds"] = [type(t).__name__ for t in out]
        seen["ops"] = sorted(op.type for op in graph.get_operations()[first:])
        return [t for t in out if isinstance(t, tf.Tensor)]

    values = [v.numpy().tolist() for v in f()]
    return seen, values


@pytest.mark.cluster
def test_the_anatomy_gate_is_one_op_for_dense_gradients_and_keeps_sparse_ones_sparse(cluster4):
    """A step's clock reads gate the gradients through one IdentityN; an embedding's
    sparse gradient must not become a dense tensor of the whole table on the way."""
    seen, values = cluster4.client[0].apply_sync(_gated_in_a_trace)
    assert seen["kinds"][1:3] == ["IndexedSlices", "NoneType"] and seen["kinds"][0] == seen["kinds"][3] != "IndexedSlices"
    assert seen["ops"].count("IdentityN") == 1 and seen["ops"].count("Identity") <= 3, seen["ops"]
    assert values == [[1.0, 1.0, 1.0], [0.0, 0.0]]


@pytest.mark.cluster
@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_every_strategy_reports_its_anatomy(cluster4, name):
    topology = TOPOLOGIES[name]
    run = cluster4.train(MLP, DIGITS, global_batch_size=64, steps=100, steps_per_execution=10,
                         **topology).wait(timeout=300)
    h = run.history
    for column in ("input_time", "compute_time", "comm_time", "comm_bytes"):
        assert h[column].notna().all(), column
    assert (h.compute_time > 0).all() and (h.input_time >= 0).all() and (h.comm_time >= 0).all()
    a = run.anatomy()
    workers = sorted(h.worker.unique())
    assert list(a.worker) == workers
    assert a[list(anatomy.PARTS)].sum(axis=1).round(6).eq(1).all()
    assert (a[list(anatomy.PARTS)] >= 0).all().all()
    assert (a.compute > 0).all()
    if name == "single":
        assert (a.bytes_per_step == 0).all() and (a.waiting == 0).all()
    elif name == "parameter_server":
        assert (a.communication > 0).all() and (a.bytes_per_step == 0).all()  # no all-reduce
    else:  # float32 gradients (parameters, averaging every step): 4 bytes each
        assert (h.comm_bytes == PARAMS * 4).all()
        assert (a.communication > 0).all()


@pytest.mark.cluster
@pytest.mark.parametrize("name, kind, size", [("multi_worker_mirrored", "fp16", 2), ("parameter_averaging", None, 4)])
def test_anatomy_off_times_nothing_but_counts_the_bytes_sent(cluster4, name, kind, size):
    """Without the anatomy no step is timed, but a run that all-reduces still reports the
    bytes it hands to the collectives, in run.history and on the dashboard."""
    from workbench.kernel.views import render

    run = cluster4.train(MLP, DIGITS, global_batch_size=64, steps=20, anatomy=False, compression=kind,
                         **TOPOLOGIES[name]).wait(timeout=300)
    h = run.history
    assert "compute_time" not in h and run.anatomy().empty
    assert len(h) == 40 and (h.comm_bytes == PARAMS * size).all()  # averaging: every step (average_every=1)
    line = f"All-reduce: <b>{PARAMS * size:,} B/step</b> per worker ({kind or 'float32'})"
    assert line in render.inside_step_html(run) and line in render.snapshot_html(run, "finished")


def _timers(h, task, first, last):
    """The anatomy's timers (seconds per step) of ``task`` over steps ``first``..``last``."""
    steps = h[(h.worker == task) & (h.step >= first) & (h.step <= last)]
    return steps.input_time.mean(), steps.compute_time.mean(), steps.comm_time.mean()


@pytest.mark.cluster
@pytest.mark.parametrize("name", ["single", "mirrored", "multi_worker_mirrored", "parameter_averaging"])
def test_profile_traces_live_steps_and_agrees_with_the_anatomy(cluster4, name):
    """run.profile(): a TF profiler trace of N steps on every task, written under the run
    directory; its op time per category cross-checks the anatomy's timers on the same steps.

    Communication: the collective kernels' spans sit inside the timed all-reduce, which
    also holds the packing around it (concat, split), the collective's parameter
    resolution before its kernel starts and the executor's gaps; measured 0.87-0.88 of the
    timers under MWMS, 0.54-0.89 under averaging (two runs each). Compute: the trace counts
    every other op of the training calls, so besides the step's forward, backward and
    update (which fill 0.75-0.92 of the timed window, measured with the trace's own
    Timestamp ops as bounds) it counts the loop's bookkeeping the timers leave out
    (metrics, outputs written per step, the packing, the next step's variable reads):
    measured 1.30-1.91 of the timers on an idle machine, and 3.31 (parameter averaging)
    in a full run beside the other test worker's benchmarks: a trace counts an op's whole
    span, time off the core included, which inflates many small ops more than the timers'
    one window per step. Bounded by 4 x replicas: counting the collective as compute, or
    another call's steps, would go far past it (the communication is 3-10x the compute here).

    Mirrored (two replicas, one per logical device of one engine): its timers give the
    mean over the replicas, the trace the union of both replicas' ops, so its compute lies
    between one and two replicas' worth plus the bookkeeping: measured 1.99-2.19 of the
    timers (four runs). Its collective kernels covered 0.30-0.81 (1.34 once, in a full run)
    of the timed all-reduce (the same four runs, with the machine's 2 cores loaded 6-9
    deep by other work): each replica's timer also holds the packing and the executor's
    gaps, which grow when the two replicas' threads wait for a core."""
    run = cluster4.train(MLP, DIGITS, global_batch_size=64, steps=3000, steps_per_execution=10,
                         **PROFILED[name])
    try:
        try:
            p = run.profile(steps=50)
        except wb.ProfilerCrashed as e:  # TF's own bug: the crash is named, and the run resumes
            assert e.role == "worker" and "Fatal Python error" in str(e), e
            print(name, "TF's profiler crashed a worker; tracing the resumed run:", str(e).splitlines()[0])
            run = run.resume()
            p = run.profile(steps=50)
    finally:
        run.stop()
    workers = sorted(run.history.worker.unique())
    assert list(p.task) == workers
    assert (p.steps >= 50).all() and (p.ops > 0).all()
    h = run.history
    for _, row in p.iterrows():
        import glob

        assert glob.glob(f"{row.logdir}/**/*.xplane.pb", recursive=True)
        _, compute, comm = _timers(h, row.task, row["first"], row["last"])
        print(name, row.task, f"trace input {row.input * 1e3:.3f} compute {row.compute * 1e3:.3f} "
              f"comm {row.communication * 1e3:.3f} ms; timers compute {compute * 1e3:.3f} comm {comm * 1e3:.3f} ms; "
              f"ratios {row.compute / compute:.2f} {row.communication / max(comm, 1e-9):.2f}")
        # mirrored: the timers give the mean over its replicas, the trace the union of their ops
        replicas = PROFILED[name].get("devices") or 1
        assert 0.5 * compute <= row.compute <= 4 * replicas * compute
        if name == "single":
            assert row.communication == 0  # no collective inside the calls
        else:
            low = 0.2 if name == "mirrored" else 0.4
            # mirrored: the union of both replicas' collective spans lies within the sum of
            # their timed all-reduces, up to twice their mean (1.34 of it once, in a full run)
            assert low * comm <= row.communication <= 1.1 * replicas * comm + 50e-6
            assert (h.comm_bytes == replicas * PARAMS * 4).all()  # every replica's float32 gradients


@pytest.mark.cluster
def test_profile_traces_a_parameter_server_run_where_its_steps_execute(cluster4):
    """A parameter-server step runs in a worker's server and updates variables on the PS
    task: run.profile() traces those engines' processes (the chief only dispatches).

    Cross-check: a worker's op kernels fit inside its timed step (compute + push). They
    cover only part of it (measured 0.40 and 0.64, 4.25 of 10.61 and 3.87 of 6.03 ms per
    step; walkthrough 10's run: 0.60 and 0.48): a step waits for the PS task's variables in
    asynchronous receives, which no op event spans, and its function is split between the
    worker's and the PS's partitions; the timers read those waits, the trace cannot
    attribute them. (Before the traces were started and stopped on every engine at once,
    the steps counted included those run while earlier stops parsed their traces: ~1,000-
    2,000 for 100 asked, and this read 0.09-0.30.)"""
    run = cluster4.train(MLP, DIGITS, global_batch_size=64, steps=20000, **TOPOLOGIES["parameter_server"])
    try:
        p = run.profile(steps=100)
    finally:
        run.stop()
    assert list(p.task) == ["ps:0", "worker:0", "worker:1"]
    assert (p.ops > 0).all() and p.set_index("task").steps["ps:0"] >= 100
    h = run.history
    for _, row in p.iterrows():
        import glob

        assert glob.glob(f"{row.logdir}/**/*.xplane.pb", recursive=True)
        if row.task.startswith("worker"):
            _, compute, comm = _timers(h, row.task, row["first"], row["last"])
            print(row.task, row.steps, f"trace input {row.input * 1e3:.3f} compute {row.compute * 1e3:.3f} "
                  f"comm {row.communication * 1e3:.3f} ms; timers compute {compute * 1e3:.3f} comm {comm * 1e3:.3f} ms")
            assert row.steps > 0 and row.compute > 0 and row.communication > 0  # sends to the PS
            assert row.compute + row.communication <= compute + comm
        else:
            print(row.task, row.steps, f"trace compute {row.compute * 1e3:.3f} comm {row.communication * 1e3:.3f} ms")
            assert row.communication > 0  # its variables sent to the workers


@pytest.mark.cluster
@pytest.mark.parametrize("strategy", ["multi_worker_mirrored", "parameter_averaging"])
def test_compressed_all_reduce_converges_and_moves_a_half_or_a_quarter_of_the_bytes(cluster4, strategy):
    runs = {kind: cluster4.train(MLP, DIGITS, strategy=strategy, workers=2, global_batch_size=64, steps=300,
                                 learning_rate=0.1, compression=kind).wait(timeout=300)
            for kind in (None, "fp16", "bf16", "int8")}
    full = runs[None].history.comm_bytes
    assert (full == PARAMS * 4).all()
    assert (runs["fp16"].history.comm_bytes == PARAMS * 2).all()  # exactly 0.5
    assert (runs["bf16"].history.comm_bytes == PARAMS * 2).all()
    # int8: one byte a value (padded to a multiple of 4) + a float32 scale per tensor
    assert (runs["int8"].history.comm_bytes == -(-PARAMS // 4) * 4 + 4 * TENSORS).all()
    base = runs[None].evaluation["test_accuracy"]
    for kind, run in runs.items():
        accuracy = run.evaluation["test_accuracy"]
        print(strategy, kind, f"accuracy {accuracy:.4f} (32-bit {base:.4f})")
        assert accuracy > 0.85 and abs(accuracy - base) <= 0.02, kind


def test_compressions_casts_and_quantizing_are_timed_apart_from_the_collective():
    """The anatomy counts compression's CPU work (``codec``) as compute: the reducer reads
    the clock around its casts (16 bits) and its quantizing and dequantizing (8 bits), not
    around the collective. Under TF's default strategy (one replica: the collective copies)."""
    import time

    import tensorflow as tf

    from workbench.engine import compression

    values = [tf.Variable(tf.random.normal((300, 200))), tf.Variable(tf.random.normal((200,)))]
    codec = {}
    for kind in (None, "fp16", "int8"):
        reduce = compression.reducer(kind, values)
        call = tf.function(lambda: reduce([tf.convert_to_tensor(v) for v in values]))
        call()  # traced
        began = time.perf_counter()
        out, sent, seconds = call()
        wall = time.perf_counter() - began
        codec[kind] = float(seconds)
        assert 0 <= codec[kind] < wall, kind
        # one replica: its own values, to float16's precision or to one quantizing step (the
        # error fed back from the call before plus this call's: half a step each)
        step = float(tf.reduce_max(tf.abs(values[0]))) / 127
        bound = {None: 1e-6, "fp16": 2 ** -10 * step * 127, "int8": 1.01 * step}[kind]
        assert float(tf.reduce_max(tf.abs(out[0] - values[0]))) <= bound, kind
    print(codec)
    # which codec takes longer is a speed, not this test's to assert (speeds belong in
    # benchmarks): on a loaded machine int8 once read less than fp16 (0.30 against 0.44 ms)
    assert codec[None] == 0 and codec["fp16"] > 0 and codec["int8"] > 0


@pytest.mark.cluster
def test_a_run_resumed_from_step_0_neither_retraces_nor_reuses_an_earlier_attempts_profile(cluster4):
    """A run lost before its first checkpoint starts again from step 0, and the events of
    its first attempt are dropped. Its fresh tasks once found that attempt's profile
    request still asked (so they traced it again, from step 20) and the next profile() took
    the same request number, so its summary read both attempts' traces from one directory:
    compute at 4.65-4.71 of the timers in two full runs, after TF's profiler crashed a
    worker. A ratio to the timers cannot tell that apart on a loaded machine (a correct
    summary measured 3.4 of them in a full run, the other test worker busy), so the check is
    the trace files under the summary's directory: one session's."""
    import glob
    import os
    import signal

    run = cluster4.train(MLP, DIGITS, global_batch_size=64, steps=100_000, steps_per_execution=10,
                         checkpoint_every=1_000_000, **TOPOLOGIES["single"])
    try:
        first = run.profile(steps=20)
        os.kill(cluster4.engine_info[run.tasks[0].engine_id].pid, signal.SIGKILL)
        with pytest.raises(wb.EngineError, match="it saved no checkpoint yet"):
            run.wait(timeout=60)
        run = run.resume()
        wait_for(lambda: run.step >= 200 or run.done, 120, lambda: f"the resumed run past step 200: {run}")
        assert "profile" not in set(run.events.kind)  # the first attempt's request: not traced again
        second = run.profile(steps=20)
    finally:
        run.stop()
    assert set(second.logdir).isdisjoint(first.logdir)
    # one trace session's file in its own directory: the summary read this attempt's trace only
    traces = glob.glob(os.path.join(second.logdir[0], "**", "*.xplane.pb"), recursive=True)
    assert len(traces) == 1, traces
    _, compute, _ = _timers(run.history, second.task[0], second["first"][0], second["last"][0])
    # the bug read both attempts' traces: more compute, never less; so the sibling test's upper
    # bound. Its lower one (0.5) is no check of this bug, and load breaks it: the timers count
    # time the step's thread was descheduled, the trace only the ops (0.38 and 0.49 in two full
    # runs beside other heavy tests)
    assert 0 < second.compute[0] <= 4 * compute
