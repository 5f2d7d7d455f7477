"""The input pipeline every strategy uses, checked in this process with TensorFlow:
pipelines partition one seeded stream, so no example is read twice per epoch, global
batch s equals a single process's batch s, and a resumed run skips exactly what it did."""

import numpy as np
import pytest

import workbench as wb
from workbench.common import options
from workbench.engine import build
from workbench.kernel.runs.job import make_job

tf = pytest.importorskip("tensorflow")

N = 100


def job(global_batch_size=8, **kw):
    data = wb.datasets.from_numpy(np.arange(N, dtype="float32").reshape(N, 1), np.arange(N),
                                  x_test=np.zeros((1, 1)), y_test=np.zeros(1, "int32"))
    args = dict(options.defaults(job_only=True), model=wb.models.mlp(), data=data, learning_rate=0.1,
                global_batch_size=global_batch_size, steps=10, seed=7, checkpoint_every=0)
    args.update(kw)
    return make_job(None, **args)


def batches(fn, pipelines, index, count):
    ctx = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index,
                                     num_replicas_in_sync=pipelines)
    it = iter(fn(ctx))
    return [next(it)[1].numpy() for _ in range(count)]


def test_two_pipelines_partition_an_epoch_and_match_a_single_process():
    fn = build.dataset_fn(job())
    steps = N // 8  # 12 global batches of 8: 96 distinct examples of the first epoch
    w0, w1 = batches(fn, 2, 0, steps), batches(fn, 2, 1, steps)
    seen = np.concatenate(w0 + w1)
    assert len(seen) == 96 and len(set(seen.tolist())) == 96, "an example was read twice in one epoch"
    single = batches(fn, 1, 0, steps)
    for s in range(steps):
        assert sorted(np.concatenate([w0[s], w1[s]]).tolist()) == sorted(single[s].tolist())


def test_a_resumed_pipeline_starts_where_the_checkpoint_left_off():
    j = job()
    full = batches(build.dataset_fn(j), 2, 1, 9)
    resumed = batches(build.dataset_fn(j, start_step=5), 2, 1, 4)
    assert [b.tolist() for b in resumed] == [b.tolist() for b in full[5:]]


def test_pipelines_run_without_the_autotune_model_thread_whose_deletion_stalled_runs():
    def users_fn(ctx):
        return tf.data.Dataset.range(10).batch(2).prefetch(tf.data.AUTOTUNE)

    ctx = tf.distribute.InputContext(1, 0, 1)
    for fn in (build.dataset_fn(job()), build.dataset_fn(job(data=users_fn))):
        ds = fn(ctx)
        assert ds.options().autotune.enabled is False
        assert len(list(ds.take(3))) == 3


def test_a_dataset_fn_that_returns_no_dataset_is_named_in_the_error():
    fn = build.dataset_fn(job(data=lambda ctx: np.zeros(3)))
    with pytest.raises(TypeError, match=r"data: the dataset_fn returned ndarray; expected a tf.data.Dataset"):
        fn(tf.distribute.InputContext(1, 0, 1))
