"""``run.explain()`` and ``wb.predict(...)`` on real runs: the cost model beside what the run
measured, for live and recorded runs, and what it refuses. The model's own numbers are
checked by hand in tests/test_costmodel.py; here, that a run is read into it right."""

from dataclasses import replace

import pytest

import workbench as wb
from workbench.common import costmodel, placement
from workbench.kernel.runs import explain

pytestmark = pytest.mark.cluster
DIGITS = wb.datasets.digits()


@pytest.fixture(scope="module")
def runs(cluster):
    def train(strategy, **kw):
        return cluster.train(wb.models.mlp((64, 32)), DIGITS, strategy=strategy, steps=120, global_batch_size=64,
                             checkpoint_every=0, dashboard=False, **kw).wait(timeout=300)

    return {"mwms": train("multi_worker_mirrored", workers=2), "ps": train("parameter_server", workers=1, ps=1),
            "single": train("single", workers=1), "untimed": train("single", workers=1, anatomy=False)}


def test_a_synchronous_run_is_explained_figure_by_figure(runs):
    run = runs["mwms"]
    e = run.explain()
    t = e.table.set_index("figure")
    assert list(e.table.columns) == ["figure", "predicted", "measured", "ratio", "source"]
    # the model's bytes (the placement's trainable variables, float32) are what the steps sent
    sent = t.loc["bytes handed to the all-reduce per step"]
    assert sent.predicted == 4 * (64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10) and sent.ratio == pytest.approx(1.0)
    assert t.loc["compute per step (ms)", "source"] == "measured (the model's input)"
    assert t.loc["steps/s", "measured"] > 0 and 0 < t.loc["steps/s", "ratio"] < 10
    assert e.sentence.endswith(f"measured {t.loc['steps/s', 'measured']:.3g} ({t.loc['steps/s', 'ratio']:.2f}).")
    assert any(e.sentence.startswith(kind) for kind in ("compute-bound", "overhead-bound", "latency-bound",
                                                         "communication-bound")), e.sentence
    assert "<table>" in e._repr_html_() and "measured / predicted" in e._repr_html_()
    # no wb.calibrate_links in this home: the model's constant for the loopback, and it says so
    assert e.title.endswith("; loopback latency: the model's constant (wb.calibrate_links(cluster) measures "
                            "this machine's)"), e.title
    assert e.prediction["latency_time"] == pytest.approx(2 * explain.LOOPBACK.alpha)
    # the same run read back in any kernel: the same prediction from its files
    again = wb.load(run.id)
    assert again is run or again.explain().table.predicted.tolist() == pytest.approx(e.table.predicted.tolist())


def test_a_float64_models_16_bit_messages_are_predicted_as_sent(cluster):
    """fp16 sends 2 bytes a value whatever the model's dtype: a float64 model's messages
    are a quarter of its variables' bytes, not half (the model once took every value as
    float32); its packs are counted from the bytes as sent."""
    run = cluster.train(wb.models.mlp((64, 32), dtype="float64"), DIGITS, strategy="multi_worker_mirrored", workers=2,
                        steps=30, global_batch_size=64, checkpoint_every=0, dashboard=False, compression="fp16",
                        bytes_per_pack=8500).wait(timeout=300)
    values = 64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10
    assert explain.value_bytes(run.placement) == 8.0
    sent = run.explain().table.set_index("figure").loc["bytes handed to the all-reduce per step"]
    assert sent.predicted == 2 * values and sent.ratio == pytest.approx(1.0), sent
    # each tensor's bytes as sent (a quarter of float64's), which the packs are counted from
    assert explain.tensor_bytes(run.placement, 16) == [2.0 * b / 8 for b in explain.tensor_bytes(run.placement)]
    assert placement.packs(run.placement, 8500, 16) == costmodel.packs(explain.tensor_bytes(run.placement, 16), 8500)


def test_a_recorded_run_is_explained_from_its_files(runs, tmp_path):
    from workbench.kernel.runs.recorded import RecordedRun

    run = runs["mwms"]
    recorded = RecordedRun(run.run_dir)  # not the live handle this kernel holds
    assert recorded.explain().table.predicted.tolist() == pytest.approx(run.explain().table.predicted.tolist())


def test_a_resumed_run_is_explained_from_its_newest_attempt(cluster):
    """A resumed run's figures count from its resume on (``job.first_step``), as its
    dashboard's do: explain() of a run read from its files once timed both attempts, the
    pause between them included."""
    from workbench.common import figures
    from workbench.kernel.runs.recorded import RecordedRun

    first = cluster.train(wb.models.mlp((64, 32)), DIGITS, strategy="single", workers=1, steps=120,
                          global_batch_size=64, checkpoint_every=60, dashboard=False).wait(timeout=300)
    resumed = cluster.resume(first.id, steps=240).wait(timeout=300)
    run = RecordedRun(resumed.run_dir)  # read from its files: both attempts' rows
    assert run.job.first_step == 121 and run.history.step.min() == 1
    measured = run.explain().table.set_index("figure").loc["steps/s", "measured"]
    # the newest attempt's steps past its first two calls, which trace again (explain.timed_from)
    assert explain.timed_from(run.job) == 121 + run.job.steps_per_execution
    newest = figures.history_figures(run.history, 64, explain.timed_from(run.job))["steps_per_s"]
    whole = figures.history_figures(run.history, 64)["steps_per_s"]
    assert measured == pytest.approx(newest) and measured != pytest.approx(whole, rel=1e-3), (measured, newest, whole)


def test_a_short_runs_figures_leave_out_its_first_two_calls_which_trace(cluster):
    """A run of four calls: ``run.anatomy()`` keeps all its steps, the tracing ones too (a
    40-step run's first call took 14x a later one's), and explain() once read 21 ms a step
    of "input, waiting and other" from them, against 2.6 ms past them, and named the run
    overhead-bound. Its figures, measured and predicted, now count the steps after the
    first two calls only."""
    from workbench.common import figures

    run = cluster.train(wb.models.mlp((64, 32)), DIGITS, strategy="multi_worker_mirrored", workers=2, steps=40,
                        steps_per_execution=10, global_batch_size=64, checkpoint_every=0,
                        dashboard=False).wait(timeout=300)
    every, later = run.anatomy(), run.anatomy(skip=20)
    assert every.steps.tolist() == [40, 40] and later.steps.tolist() == [20, 20]  # the view's default: every step
    assert every.step_time.mean() > 1.5 * later.step_time.mean(), (every, later)  # the first calls trace
    h = run.history
    table = run.explain().table.set_index("figure")
    assert table.loc["step time per worker (ms)", "measured"] == pytest.approx(later.step_time.mean() * 1e3)
    # steps/s over the steps after the second call's end: calls 3 and 4 (explain.timed_from)
    assert table.loc["steps/s", "measured"] == pytest.approx(figures.history_figures(h, 64, 11)["steps_per_s"])
    assert figures.steady_stretch(h, 11)[0] == 20


def test_a_parameter_server_run_counts_its_pulls_in_compute_and_a_ps_load(runs):
    t = runs["ps"].explain().table.set_index("figure")
    assert t.loc["compute per step (ms)", "source"] == "model: pulls of the variables"
    assert t.loc["ps:0 load (bytes/s pulled)", "predicted"] > 0


def test_predict_answers_for_runs_not_made_and_refuses_what_it_cannot_know(runs):
    run = runs["mwms"]
    four = wb.predict(run, workers=4).table.set_index("figure")
    assert four.loc["steps/s", "predicted"] > 0 and four.measured.isna().all()
    eight = wb.predict(run, workers=8, link="1gbit", cores=None)
    t = eight.table.set_index("figure")
    model = 64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10
    H = costmodel.RING_MESSAGE_BYTES  # each of a worker's 14 messages a step: its request and headers
    ring = 2 * 7 / 8 * model * 4 + 14 * H
    assert t.loc["w0 link bytes per step", "predicted"] == pytest.approx(ring)
    assert "8 worker(s)" in eight.title and "each host its own cores" in eight.title
    half = wb.predict(run, workers=8, link="1gbit", cores=None, compression="fp16").table.set_index("figure")
    # 8-bit messages: the quantizing's CPU (costmodel.CODEC) joins the calibration's compute, 6 tensors of them
    int8 = wb.predict(run, workers=2, cores=None, compression="int8").prediction["compute_time"]
    assert int8 - wb.predict(run, workers=2, cores=None).prediction["compute_time"] == pytest.approx(
        costmodel.codec_time(model * 4, 8, 6))
    assert half.loc["w0 link bytes per step", "predicted"] == pytest.approx((ring - 14 * H) / 2 + 14 * H)
    # a data centre's latency: each of the ring's 2(n-1) messages waits 50 us instead of 2 ms
    fast = wb.predict(run, workers=8, link="1gbit", cores=None, latency=50e-6).prediction
    assert eight.prediction["latency_time"] == pytest.approx(14 * 2e-3)
    assert fast["latency_time"] == pytest.approx(14 * 50e-6)
    assert fast["comm_time"] == pytest.approx(eight.prediction["comm_time"] - 14 * (2e-3 - 50e-6))
    # packed a tensor a pack: the model's 6 tensors, 6 all-reduces, each its 14 latencies
    packed = wb.predict(run, workers=8, link="1gbit", cores=None, bytes_per_pack=1).prediction
    assert packed["latency_time"] == pytest.approx(6 * 14 * 2e-3)
    assert packed["comm_time"] == pytest.approx(eight.prediction["comm_time"] + 5 * 14 * (2e-3 + H / (1e9 / 8 * 0.95)))
    # each worker's link: the ring's payload, and what its counters read of it in frames (headers, ACKs)
    assert t.loc["w0 link bytes per step", "source"] == (
        f"model: payload; {costmodel.wire_bytes(ring, ring):,.0f} in frames with ACKs")
    assert "latency 0.05 ms a message, as asked" in wb.predict(run, workers=8, link="1gbit", latency=50e-6).title
    # another number of PS tasks: the calibration's variables dealt round-robin, none counted twice
    base = explain.scenario(runs["ps"])
    assert explain._spread(replace(base, ps_variables={"ps:0": 7}), 3) == {"ps:0": 3, "ps:1": 2, "ps:2": 2}
    assert explain._spread(base, 1) == base.ps_variables and sum(explain._spread(base, 2).values()) == base.ps_variables["ps:0"]
    with pytest.raises(wb.ConfigError, match="argument 'bytes_per_pack'. Received: bytes_per_pack=-1"):
        wb.predict(run, bytes_per_pack=-1)
    with pytest.raises(wb.ConfigError, match="argument 'bytes_per_pack'. Received: bytes_per_pack=1. Expected 0 "
                                             r"with strategy='parameter_server' \(nothing is all-reduced\)"):
        wb.predict(runs["ps"], bytes_per_pack=1)
    with pytest.raises(wb.ConfigError, match="Expected 0 with 8-bit messages"):
        wb.predict(run, compression="int8", bytes_per_pack=1)
    with pytest.raises(wb.ConfigError, match="argument 'latency'. Received: latency=-1"):
        wb.predict(run, latency=-1)
    with pytest.raises(wb.ConfigError, match="argument 'device'. Received: device='gpu'. Expected 'cpu'"):
        wb.predict(run, device="gpu")
    with pytest.raises(wb.ConfigError, match="argument 'link'. Received: link='fast'"):
        wb.predict(run, link="fast")
    with pytest.raises(wb.ConfigError, match="argument 'compression'. Received: compression='int4'"):
        wb.predict(run, compression="int4")
    with pytest.raises(wb.ConfigError, match="argument 'workers'. Received: workers=2"):
        wb.predict(runs["single"], workers=2)
    with pytest.raises(wb.ConfigError, match="argument 'run'.*has no anatomy"):
        runs["untimed"].explain()


def test_predict_says_when_a_compressed_calibrations_codec_leaves_no_compute_to_scale(runs, monkeypatch):
    """``wb.predict`` takes a compressed calibration's codec (``costmodel.CODEC``) out of its
    compute before scaling it; when the codec's estimate exceeds what the run computed, the
    compute is taken as 0, and the title says so with both numbers."""
    run = runs["mwms"]
    real = explain.scenario
    monkeypatch.setattr(explain, "scenario", lambda r: replace(real(r), bits=16))  # as if it had sent 16 bits
    assert "codec" not in wb.predict(run).title  # 0.1 ns a byte: microseconds, well inside its compute
    monkeypatch.setattr(explain, "scenario", lambda r: replace(real(r), bits=8))  # as if it had sent 8 bits
    monkeypatch.setattr(costmodel, "CODEC", {**costmodel.CODEC, 8: (1.0, 0.0)})  # 1 s a tensor: 6 s, more than computed
    e = wb.predict(run)
    assert e.title.endswith("less than its 8-bit messages' codec alone (6000.00 ms, costmodel.CODEC): its compute "
                            "is taken as 0"), e.title
    assert e.prediction["compute_time"] == pytest.approx(6.0)  # the codec alone, at the same shape


def test_packing_splits_the_all_reduce_into_the_packs_tfs_grouping_makes_each_with_its_latencies(cluster):
    """``bytes_per_pack`` (TF's ``CommunicationOptions``) splits the gradients' all-reduce
    into packs, one all-reduce each, each paying 2(n-1) message latencies for the same bytes.
    An MLP of 16 tensors on 2 workers, in 1 pack, in 16 (a pack a tensor), and in the 4 packs
    the model counts for ``bytes_per_pack=5000`` (checked against TF's own grouping in
    tests/test_costmodel.py): the same bytes each time, the latencies of its packs. The time
    the packs' messages take, measured against the model's, is ``bench/packing.py``'s."""
    from workbench.common import costmodel

    model = wb.models.mlp((32,) * 7)  # 8 layers: 16 tensors
    runs = {per_pack: cluster.train(model, DIGITS, workers=2, steps=60, global_batch_size=64, checkpoint_every=0,
                                    bytes_per_pack=per_pack, dashboard=False).wait(timeout=300)
            for per_pack in (0, 1, 5000)}
    packs = {}
    for per_pack, run in runs.items():
        e = run.explain()
        t = e.table.set_index("figure")
        assert t.loc["bytes handed to the all-reduce per step", "ratio"] == pytest.approx(1.0)
        packs[per_pack] = costmodel.packs(explain.tensor_bytes(run.placement), per_pack)
        assert e.prediction["latency_time"] == pytest.approx(packs[per_pack] * 2 * explain.LOOPBACK.alpha)
    assert packs == {0: 1, 1: 16, 5000: 4}


def test_calibrate_links_measures_the_loopback_with_tfs_ring_and_the_model_takes_it(cluster, tmp_path, monkeypatch):
    """``wb.calibrate_links``: alpha from 16 packs against one, the CPU per byte from a 4 MB
    ring, kept for this machine; ``run.explain()`` then predicts a local ring with them, and
    says so (a 1 MB ring's communication measured against that prediction: bench/packing.py)."""
    from workbench.common import costmodel
    from workbench.store import calibration

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))  # this test's calibration, no other test's
    c = wb.calibrate_links(cluster, steps=40)
    print("calibrated", {k: v for k, v in c.items() if k != "runs"})
    assert c["path"] == "loopback" and c["workers"] == 2
    assert 1e-5 < c["alpha_s"] < 0.05 and 1e-11 < c["cpu_s_per_byte"] < 1e-7, c
    assert calibration.read()["loopback"]["alpha_s"] == c["alpha_s"]
    assert explain.loopback() == costmodel.Link(float("inf"), c["alpha_s"], cpu_per_byte=c["cpu_s_per_byte"])
    run = cluster.train(wb.models.mlp((3300,)), DIGITS, strategy="multi_worker_mirrored", workers=2, steps=40,
                        global_batch_size=32, steps_per_execution=5, checkpoint_every=0, dashboard=False,
                        logs=False).wait(timeout=300)
    e = run.explain()
    print("1 MB ring on the calibrated loopback:", e.table.set_index("figure").loc["communication per step (ms)"].to_dict())
    assert e.prediction["latency_time"] == pytest.approx(2 * c["alpha_s"])  # one pack: 2(n-1) messages
    assert e.title.endswith("; loopback latency and CPU per byte: this machine's wb.calibrate_links"), e.title
    with pytest.raises(wb.ConfigError, match="workers"):
        wb.calibrate_links(cluster, workers=1)


def test_an_embeddings_sparse_gradients_are_counted_and_predicted_as_gathered(cluster):
    """An embedding's gradient is sparse (a row per token looked up, and its index), and TF
    all-gathers those rows instead of all-reducing the table: the steps count the bytes the
    gathers take, not the table's (20,000 x 32 float32: 2.56 MB, where a replica's 32
    examples of 16 tokens hand over 512 rows), and the model predicts them. 16-bit messages
    halve the rows' values, not their indices."""
    import numpy as np

    vocab, dim, seq = 20_000, 32, 16

    def model():
        import keras

        return keras.Sequential([keras.Input((seq,)), keras.layers.Embedding(vocab, dim),
                                 keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(10)])

    tokens = np.random.default_rng(0).integers(0, vocab, size=(2048, seq))
    data = wb.datasets.from_numpy(tokens, tokens[:, 0] % 10)
    dense = 4 * (dim * 10 + 10)
    for compression, value in ((None, 4), ("fp16", 2)):
        run = cluster.train(model, data, strategy="multi_worker_mirrored", workers=2, global_batch_size=64, steps=30,
                            loss="sparse_categorical_crossentropy", compression=compression, checkpoint_every=0,
                            dashboard=False).wait(timeout=300)
        rows = run.placement[run.placement.sparse_bytes.notna()]
        gathered = 32 * seq * (dim * value + 4)  # int32 indices
        assert rows.variable.nunique() == 1 and rows.variable.iloc[0].endswith("/embeddings"), rows
        assert set(rows.sparse_bytes) == {gathered}
        sent = run.explain().table.set_index("figure").loc["bytes handed to the all-reduce per step"]
        print(compression, sent.to_dict())
        assert sent.measured == gathered + dense * value / 4 and sent.ratio == pytest.approx(1.0), sent
        assert f"sparse gradients: {gathered:,} gathered" in sent.source
    # its rows were measured at 16 bits only: another precision is not predicted from them
    with pytest.raises(wb.ConfigError, match="compression"):
        wb.predict(run, compression=None)
    assert wb.predict(run, workers=4).table.set_index("figure").loc["steps/s", "predicted"] > 0
    # under parameter servers a worker pulls the table whole and pushes its rows (a worker's
    # batch of 32 x 16 tokens: int32 indices): the PS task's load is the table, its intake the rows
    ps = cluster.train(model, data, strategy="parameter_server", workers=1, ps=1, global_batch_size=32, steps=30,
                       loss="sparse_categorical_crossentropy", checkpoint_every=0, dashboard=False).wait(timeout=300)
    rows = 32 * seq * (dim * 4 + 4)
    s = explain.scenario(ps)
    assert s.ps_sparse == {"ps:0": (vocab * dim * 4, rows)} and s.model_bytes == dense
    p = wb.predict(ps, workers=2, ps=2, link="100mbit").prediction  # the table dealt to ps:0, as TF deals it
    calls = (costmodel.PS_TASK_BYTES + 3 * costmodel.PS_VARIABLE_BYTES
             + (costmodel.PS_CALL_BYTES + 3 * costmodel.PS_CALL_VARIABLE_BYTES) / s.steps_per_call)
    assert p["bytes_per_step"]["p0"]["tx"] == pytest.approx(vocab * dim * 4 + dense / 2 + calls)
    assert p["bytes_per_step"]["p0"]["rx"] == pytest.approx(rows + dense / 2 + calls)


def test_a_parameter_servers_parts_of_a_step_weigh_each_worker_by_its_steps(tmp_path):
    """Under a parameter server a faster worker makes more of the steps: a step's measured
    parts are its workers' weighed by their steps, as the model's are (09's straggler run
    read its communication at 2.08x the model's when each worker counted once)."""
    from checks import recorded_run

    from workbench.kernel.runs.recorded import RecordedRun

    def row(step, worker, step_time, comm):
        return dict(step=step, worker=worker, time=1000.0 + step * 0.01, loss=1.0, accuracy=0.5, step_time=step_time,
                    input_time=0.001, compute_time=step_time - comm - 0.001, comm_time=comm, comm_bytes=0,
                    examples_per_s=1.0, replicas=1)

    # worker:0 makes 3 steps of 10 ms (2 ms pushing) for each of worker:1's 30 ms (20 ms pushing)
    rows = [row(s, "worker:1", 0.030, 0.020) if s % 4 == 0 else row(s, "worker:0", 0.010, 0.002)
            for s in range(1, 161)]
    run = RecordedRun(recorded_run(tmp_path, rows, {"final_step": 160}, strategy="parameter_server", ps=1, steps=160))
    table = run.anatomy().set_index("worker")
    fast, slow = table.loc["worker:0", "steps"], table.loc["worker:1", "steps"]
    assert (fast, slow) == (118, 40)  # the first two steps (both worker:0's) trace: left out
    parts = explain._parts(run)
    assert parts["step_time"] == pytest.approx((fast * 0.010 + slow * 0.030) / (fast + slow))
    assert parts["communication"] == pytest.approx((fast * 0.002 + slow * 0.020) / (fast + slow))
    assert parts["step_time"] < 0.019  # each worker counted once: 0.020
