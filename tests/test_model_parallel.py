"""Model parallelism across engines (``strategy="model_parallel"``): one model cut into stages,
stage i's variables and ops on worker engine i, the chief driving it over TF's gRPC runtime.
What crosses a cut is measured here as tensor sizes; on emulated hosts, on the links'
counters (walkthrough 01)."""

import pytest

import workbench as wb
from workbench.common import costmodel
from checks import relative_difference

pytestmark = pytest.mark.cluster

DIGITS = wb.datasets.digits()
ARGS = dict(data=DIGITS, global_batch_size=64, steps=40, seed=3, learning_rate=0.1, checkpoint_every=0,
            dashboard=False)


def test_a_model_split_across_two_engines_trains_to_the_whole_models_weights(cluster4):
    split = cluster4.train(wb.models.split_mlp((64, 32), devices=2), strategy="model_parallel", workers=2,
                           **ARGS).wait(timeout=300)
    whole = cluster4.train(wb.models.mlp((64, 32)), strategy="single", workers=1, **ARGS).wait(timeout=300)
    assert split.status == "finished" and split.final_step == 40
    p = split.placement
    devices = p[p.variable.notna()].set_index("variable").device
    assert devices["split_mlp/dense_0/kernel"] == "/job:worker/replica:0/task:0/device:CPU:0"
    assert devices["split_mlp/output/kernel"] == "/job:worker/replica:0/task:1/device:CPU:0"
    # placement changes where the work happens, not one number
    assert relative_difference(split.weights(), whole.weights()) < 1e-6
    assert split.evaluation["test_accuracy"] == pytest.approx(whole.evaluation["test_accuracy"])
    # split_mlp((64, 32), devices=2) cuts after the 32-wide layer: 2 x batch x 32 x 4 bytes a step
    assert (split.history.comm_bytes == 2 * 64 * 32 * 4).all()
    e = split.explain().table.set_index("figure")
    row = e.loc["bytes across the cuts per step (activations, their gradients)"]
    assert row.predicted == 2 * 64 * 32 * 4 and row.ratio == pytest.approx(1.0)


def test_where_the_cut_falls_decides_what_crosses_not_what_is_learned(cluster4):
    narrow = cluster4.train(wb.models.split_mlp((256, 16), devices=2, stages=(0, 0, 1)), strategy="model_parallel",
                            workers=2, **ARGS).wait(timeout=300)
    wide = cluster4.train(wb.models.split_mlp((256, 16), devices=2, stages=(0, 1, 1)), strategy="model_parallel",
                          workers=2, **ARGS).wait(timeout=300)
    assert (narrow.history.comm_bytes == 2 * 64 * 16 * 4).all()
    assert (wide.history.comm_bytes == 2 * 64 * 256 * 4).all()
    assert relative_difference(narrow.weights(), wide.weights()) < 1e-6
    # the anatomy's compute is the stages' own: about the same for both cuts (the same
    # layers), not the wide cut's transfers (timed as compute before, 50x the narrow's)
    compute = [r.history.compute_time.iloc[10:].median() for r in (narrow, wide)]
    assert max(compute) < 4 * min(compute), compute
    # a prediction on hosts of their own, at another batch: the cut's bytes scale with the
    # batch (activations forward and the int32 labels with them; their gradients back), the
    # cut's requests and headers do not
    p = wb.predict(wide, link="20mbit", global_batch_size=128).prediction
    call = costmodel.CUT_STEP_BYTES
    assert p["bytes_per_step"]["w0"] == {"tx": 128 * 256 * 4 + 128 * 4 + call, "rx": 128 * 256 * 4 + call}
    assert p["bottleneck"] == "network: w0" or p["bottleneck"] == "network: w1"
    with pytest.raises(wb.ConfigError, match=r"argument 'workers'. Received: workers=3"):
        wb.predict(wide, workers=3)


def test_a_split_model_and_its_strategy_are_checked_before_any_engine_starts(cluster4):
    split = wb.models.split_mlp((64, 32), devices=2)
    with pytest.raises(wb.ConfigError, match=r"argument 'model'.*Expected wb.models.split_mlp"):
        cluster4.train(wb.models.mlp((64, 32)), strategy="model_parallel", workers=2, **ARGS)
    with pytest.raises(wb.ConfigError, match=r"argument 'workers'. Received: workers=3.*workers=2"):
        cluster4.train(split, strategy="model_parallel", workers=3, **ARGS)
    with pytest.raises(wb.ConfigError, match=r"argument 'model'.*not split with strategy='multi_worker_mirrored'"):
        cluster4.train(split, strategy="multi_worker_mirrored", workers=2, **ARGS)
    with pytest.raises(wb.ConfigError, match=r"argument 'stages'. Received: stages=\(0, 2, 1\)"):
        wb.models.split_mlp((64, 32), devices=2, stages=(0, 2, 1))
    with pytest.raises(wb.ConfigError, match=r"argument 'stages'"):
        wb.models.split_mlp((64, 32), devices=2, stages=(1, 1, 1))


def test_three_stages_on_three_engines_and_a_resume_from_the_chiefs_checkpoint(cluster4):
    """Chief and 3 stage workers: 4 engines. A middle stage receives the activations and
    sends its input's gradient back, as the first and last do; the checkpoint the chief
    saves holds every stage's variables, and a resume continues from it."""
    model = wb.models.split_mlp((64, 32), devices=3)
    args = dict(ARGS, steps=20, checkpoint_every=20)
    first = cluster4.train(model, strategy="model_parallel", **args).wait(timeout=300)  # workers: one per stage
    assert first.job.workers == 3
    assert first.checkpoint == 20
    resumed = first.resume(steps=40).wait(timeout=300)
    whole = cluster4.train(wb.models.mlp((64, 32)), strategy="single", workers=1,
                           **dict(ARGS, steps=40)).wait(timeout=300)
    p = resumed.placement
    devices = p[p.variable.notna()].set_index("variable").device
    assert devices["split_mlp/dense_1/kernel"] == "/job:worker/replica:0/task:1/device:CPU:0"
    assert resumed.final_step == 40 and set(resumed.history.step) >= set(range(21, 41))
    # cuts after the 64- and the 32-wide layers: 2 x batch x (64 + 32) x 4 bytes a step
    assert (resumed.history.comm_bytes == 2 * 64 * (64 + 32) * 4).all()
    # the same 40 steps as one process, the data read on from where the checkpoint left it
    assert relative_difference(resumed.weights(), whole.weights()) < 1e-6


def test_a_stopped_stage_is_named_not_waited_for_and_profile_says_what_to_read(cluster4):
    """A stage's worker that stops answering (SIGSTOP) would hold the chief's step forever:
    the run's tasks wait on each other every step, and the kernel names the stopped one."""
    import os
    import signal

    from checks import wait_for

    run = cluster4.train(wb.models.split_mlp((64, 32), devices=2), strategy="model_parallel", workers=2,
                         **dict(ARGS, steps=1_000_000))
    wait_for(lambda: run.step >= 100 or run.done, 120, lambda: f"step 100; at {run.step}")
    with pytest.raises(wb.RunStateError, match=r"splits its model across its workers.*run.anatomy\(\)"):
        run.profile()
    pid = cluster4.engine_info[next(t.engine_id for t in run.tasks if t.name == "worker:1")].pid
    os.kill(pid, signal.SIGSTOP)  # an engine this test's cluster started
    try:
        with pytest.raises((wb.RunStalled, wb.EngineError)) as info:
            run.wait(timeout=90)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:  # killed with the run's other engines
            pass
    assert "worker:1" in str(info.value) and "stopped" in str(info.value), str(info.value)


def test_the_cli_trains_a_split_mlp_under_model_parallel():
    from workbench.cli import _model

    model = _model(wb, "model_parallel", (64, 32), 10, None)
    assert isinstance(model, wb.models.SplitMLP) and model.devices == 2
    assert _model(wb, "model_parallel", (64, 32), 10, 3).devices == 3
    assert not isinstance(_model(wb, "parameter_server", (64, 32), 10, 2), wb.models.SplitMLP)
