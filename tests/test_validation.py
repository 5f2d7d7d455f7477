"""Bad input is refused in the kernel, before any engine starts, with the house message:
the argument, what was received, what was expected."""

import numpy as np
import pytest

import workbench as wb
from workbench import cli
from workbench.common import options
from workbench.kernel.runs.job import make_job


# Cluster.train's defaults (one declaration: workbench.common.options), a smaller run
GOOD = dict(options.defaults(job_only=True), model=wb.models.mlp(), data=wb.datasets.digits(), learning_rate=0.1,
            global_batch_size=64, steps=10, checkpoint_every=0)

BAD_TRAIN = [
    ({"strategy": "paramter_server"}, "strategy", "Did you mean 'parameter_server'"),
    ({"strategy": 3}, "strategy", "Expected one of"),
    ({"workers": 0}, "workers", "Expected an int >= 1"),
    ({"workers": 2.5}, "workers", "Received: workers=2.5"),
    ({"workers": True}, "workers", "Expected an int >= 1"),
    ({"workers": 5}, "workers", "fits the cluster's 4 engines"),
    ({"ps": 1}, "ps", "which has no parameter servers"),
    ({"strategy": "parameter_server", "ps": 0}, "ps", "an int >= 1 with strategy='parameter_server'"),
    ({"strategy": "parameter_server", "ps": 2, "workers": 2}, "workers", "needs 5 (1 chief + 2 ps + 2 worker)"),
    ({"strategy": "single", "workers": 2}, "workers", "runs on one engine"),
    ({"ps": -1}, "ps", "an int >= 0"),
    ({"global_batch_size": 63}, "global_batch_size", "a multiple of the 2 replicas"),
    ({"global_batch_size": 0}, "global_batch_size", "an int >= 1"),
    ({"global_batch_size": 4096}, "global_batch_size", "training examples of data 'digits'"),
    ({"steps": 0}, "steps", "an int >= 1"),
    ({"steps": "100"}, "steps", "Received: steps='100'"),
    ({"learning_rate": -0.1}, "learning_rate", "a finite number > 0"),
    ({"learning_rate": float("nan")}, "learning_rate", "a finite number > 0"),
    ({"momentum": 1.5}, "momentum", "a number in [0, 1)"),
    ({"optimizer": "adam", "momentum": 0.9}, "momentum", "applies to 'sgd'"),
    ({"optimizer": "adamm"}, "optimizer", "Did you mean 'adam'"),
    ({"loss": "crossentropy"}, "loss", "Expected one of"),
    ({"model": "mlp"}, "model", "a callable that returns a keras.Model"),
    ({"data": [1, 2, 3]}, "data", "wb.datasets.digits()"),
    ({"data": (np.zeros((10, 4)), np.zeros(9))}, "data", "Received: data='y: array of shape (9,)'. Expected one label per example"),
    ({"data": (np.zeros((0, 4)), np.zeros(0))}, "data", "a non-empty array"),
    ({"data": (np.array([[0.0, np.nan], [1.0, 2.0]]), np.zeros(2))}, "data", "1 NaN or infinite values"),
    ({"seed": -1}, "seed", "an int >= 0"),
    ({"steps_per_execution": 0}, "steps_per_execution", "an int >= 1"),
    ({"devices": 2}, "devices", "logical devices are for 'mirrored' and 'single'"),
    ({"average_every": 4}, "average_every", "only 'parameter_averaging' averages replicas"),
    ({"strategy": "parameter_averaging", "average_every": 0}, "average_every", "an int >= 1"),
    ({"strategy": "parameter_averaging", "workers": 3, "global_batch_size": 64}, "global_batch_size", "multiple of the 3 replicas"),
    ({"strategy": "parameter_averagin"}, "strategy", "Did you mean 'parameter_averaging'"),
    ({"learning_rate": "0.1"}, "learning_rate", "or a schedule such as wb.linear_scaling"),
    ({"strategy": "mirrored", "workers": 1, "devices": 3, "global_batch_size": 64}, "global_batch_size", "multiple of the 3 replicas"),
    ({"bytes_per_pack": -1}, "bytes_per_pack", "an int >= 0"),
    ({"bytes_per_pack": 1.5}, "bytes_per_pack", "Received: bytes_per_pack=1.5"),
    ({"strategy": "single", "workers": 1, "bytes_per_pack": 4096}, "bytes_per_pack", "run an all-reduce to pack"),
    ({"compression": "int8", "bytes_per_pack": 4096}, "bytes_per_pack", "gathered as one tensor"),
    ({"gradient_delay": -1}, "gradient_delay", "an int >= 0"),
    ({"strategy": "parameter_server", "workers": 1, "ps": 1, "gradient_delay": 3}, "gradient_delay",
     "0 with strategy='parameter_server'"),
    ({"variable_partitioner": 2}, "variable_partitioner", "only parameter_server shards"),
    ({"strategy": "parameter_server", "ps": 1, "variable_partitioner": "fixed"}, "variable_partitioner", "a number of shards"),
    ({"checkpoint_every": -5}, "checkpoint_every", "an int >= 0"),
    ({"data": (np.zeros((4, 2)), np.array(["cat", "dog", "cat", "dog"]))}, "data", "np.unique(y, return_inverse=True)"),
    ({"optimizer": lambda: None}, "learning_rate", "brings its own learning rate"),
    ({"optimizer": lambda: None, "learning_rate": None, "momentum": 0.9}, "momentum", "set it in the optimizer"),
    ({"optimizer": 3}, "optimizer", "a keras.optimizers.Optimizer object"),
    ({"loss": 3}, "loss", "a keras.losses.Loss object"),
    ({"metrics": "accuracy"}, "metrics", "a list of Keras metric names"),
    ({"metrics": ["loss"]}, "metrics", "not already columns of run.history"),
    ({"metrics": ["mae", "mae"]}, "metrics", "not already columns of run.history"),
    ({"metrics": [3]}, "metrics", "a Keras metric name or a keras.metrics.Metric object"),
    ({"eval_data": [1, 2]}, "eval_data", "numpy (x, y)"),
    ({"eval_data": (np.zeros((10, 64)), np.zeros(9))}, "eval_data", "Received: eval_data='y: array of shape (9,)'"),
    ({"eval_data": (np.zeros((10, 10)), np.zeros(10))}, "eval_data",
     "Received: eval_data='examples of shape (10,)'. Expected examples of the shape data has, which the model trains on: (64,)"),
    ({"eval_data": wb.datasets.synthetic(examples=20, features=10)}, "eval_data", "examples of shape (10,)"),
]


@pytest.mark.parametrize("change,argument,expected", BAD_TRAIN, ids=[f"{a}-{i}" for i, (_, a, _) in enumerate(BAD_TRAIN)])
def test_bad_training_arguments_are_refused_in_the_kernel(change, argument, expected):
    with pytest.raises(wb.ConfigError) as info:
        make_job(4, **{**GOOD, **change})
    message = str(info.value)
    assert message.startswith(f"Invalid value for argument '{argument}'. Received: "), message
    assert expected in message


def test_linear_scaling_checks_its_arguments_and_is_accepted_as_a_learning_rate():
    with pytest.raises(wb.ConfigError, match="argument 'base_batch_size'. Received: base_batch_size=0"):
        wb.linear_scaling(0.1, base_batch_size=0, global_batch_size=256)
    with pytest.raises(wb.ConfigError, match="argument 'warmup_steps'. Received: warmup_steps=-1"):
        wb.linear_scaling(0.1, 32, 256, warmup_steps=-1)
    schedule = wb.linear_scaling(0.1, base_batch_size=32, global_batch_size=256, warmup_steps=50)
    assert [schedule(0), schedule(25), schedule(50), schedule(500)] == pytest.approx([0.1, 0.45, 0.8, 0.8])
    assert make_job(4, **{**GOOD, "learning_rate": schedule}).learning_rate is schedule


def test_the_good_arguments_pass():
    job = make_job(4, **GOOD)
    assert job.steps_per_execution == 10 and job.workers == 2


@pytest.mark.parametrize("strategy,workers,ps,engines", [
    ("single", 1, 0, 1), ("mirrored", 1, 0, 1), ("multi_worker_mirrored", 2, 0, 2),
    ("parameter_averaging", 2, 0, 2), ("parameter_server", 2, 1, 4)])
def test_workers_and_ps_left_out_follow_the_strategy(strategy, workers, ps, engines):
    """``strategy="single"`` alone is a run, not a refusal of ``workers=2``, a value the user
    never gave; in the API and in the CLI (``python -m workbench train --strategy single``)."""
    job = make_job(4, **{**GOOD, "strategy": strategy})
    assert (job.workers, job.ps) == (workers, ps)
    args = cli._parser().parse_args(["train", "--strategy", strategy, "--global-batch-size", "64"])
    cli.check(GOOD["model"], GOOD["data"], {o.name: getattr(args, o.name) for o in options.TRAINING if o.cli})
    assert cli._engines_needed(args.strategy, args.workers, args.ps) == engines


def test_accuracy_is_taken_with_any_loss():
    """``metrics=["accuracy"]`` is the run's accuracy column and ``test_accuracy`` whatever the
    loss: the engines resolve it from the labels' and outputs' shapes, as Keras' compile does."""
    for loss in ("mean_squared_error", "binary_crossentropy", lambda y_true, y_pred: y_pred):
        job = make_job(4, **{**GOOD, "loss": loss, "metrics": ["accuracy", "mae"]})
        assert job.classifies and job.metrics == ("mae",)
    assert not make_job(4, **{**GOOD, "loss": "mean_squared_error", "metrics": ["mae"]}).classifies


def test_long_parameter_server_runs_default_to_20_steps_per_call():
    pss = {**GOOD, "strategy": "parameter_server"}
    assert make_job(4, **{**pss, "steps": 999}).steps_per_execution == 10
    assert make_job(4, **{**pss, "steps": 1000}).steps_per_execution == 20
    assert make_job(4, **{**pss, "steps": 1000, "steps_per_execution": 7}).steps_per_execution == 7
    assert make_job(4, **{**GOOD, "steps": 5000}).steps_per_execution == 10  # synchronous runs


BAD_CLUSTER = [
    ({"engines": 0}, "engines", "an int >= 1"),
    ({"engines": "4"}, "engines", "an int >= 1"),
    ({"engines": 2.0}, "engines", "an int >= 1"),
    ({"profile": "no-such-profile-here"}, "profile", "an existing ipyparallel profile"),
    ({"profile": 7}, "profile", "the name of an ipyparallel profile"),
    ({"cluster_id": "abc"}, "cluster_id", "a profile name beside it"),
    ({"engines": 2, "timeout": 0}, "timeout", "a finite number > 0"),
]


@pytest.mark.parametrize("kwargs,argument,expected", BAD_CLUSTER, ids=[a for _, a, _ in BAD_CLUSTER])
def test_bad_cluster_arguments_are_refused_before_anything_starts(kwargs, argument, expected):
    with pytest.raises(wb.ConfigError, match=f"argument '{argument}'.*{expected[:20]}"):
        wb.Cluster(**kwargs)


def test_unknown_launcher_is_a_config_error():
    with pytest.raises(wb.ConfigError, match="ipyparallel refused"):
        wb.Cluster(engines=1, launcher="no-such-launcher").start()


def test_training_on_a_stopped_cluster_says_so():
    with pytest.raises(wb.ClusterError, match="not running"):
        wb.Cluster(engines=1).train(wb.models.mlp(), wb.datasets.digits())


KERAS_IN_THE_KERNEL = """
import cloudpickle, keras, pytest
import workbench as wb
from workbench.common.job import FromConfig
from workbench.kernel.runs.job import make_job
GOOD = dict(model=wb.models.mlp(), data=wb.datasets.digits(), loss=keras.losses.SparseCategoricalCrossentropy(),
            optimizer=keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.01, 100, 0.9), clipnorm=1.0),
            learning_rate=None, momentum=0.0, strategy="multi_worker_mirrored", workers=2, ps=0,
            global_batch_size=64, steps=10, seed=0, steps_per_execution=None, checkpoint_every=0, eval_every=0,
            variable_partitioner=None, devices=0, metrics=["sparse_top_k_categorical_accuracy", keras.metrics.AUC()])
job = make_job(4, **GOOD)
assert isinstance(job.optimizer, FromConfig) and job.optimizer.config["clipnorm"] == 1.0
assert job.loss_name == "sparse_categorical_crossentropy" and job.classifies
assert [getattr(m, "config", {}).get("name", m) for m in job.metrics] == ["sparse_top_k_categorical_accuracy", "auc"]
rebuilt = cloudpickle.loads(cloudpickle.dumps(job.optimizer)).build()
assert type(rebuilt) is keras.optimizers.Adam and rebuilt.clipnorm == 1.0
assert isinstance(rebuilt._learning_rate, keras.optimizers.schedules.ExponentialDecay)
# a model instance travels as its config, custom layers and weights, rebuilt the same
class Scale(keras.layers.Layer):
    def call(self, x):
        return 2.0 * x
instance = keras.Sequential([keras.Input((64,)), Scale(), keras.layers.Dense(10)])
shipped = make_job(4, **{**GOOD, "model": instance}).model
assert isinstance(shipped, wb.models.Rebuilt) and "compile_config" not in shipped.config
copy = cloudpickle.loads(cloudpickle.dumps(shipped))()
assert [type(l).__name__ for l in copy.layers] == ["Scale", "Dense"] and copy is not instance
assert all((a == b).all() for a, b in zip(copy.get_weights(), instance.get_weights()))
unbuilt = make_job(4, **{**GOOD, "model": keras.Sequential([keras.layers.Dense(10)])}).model
assert unbuilt.weights == () and not unbuilt().built  # built on the engines, from the data
for change, expected in [({"model": wb.models.module_mlp(64)()}, "argument 'model'. Received: model='<Net object>'. "
                          "Expected a function that returns the tf.Module"),
                         ({"learning_rate": 0.1}, "argument 'learning_rate'. Received: learning_rate=0.1. Expected None with optimizer=<Adam object>"),
                         ({"metrics": ["no_such_metric"]}, "argument 'metrics'. Received: metrics='no_such_metric'")]:
    with pytest.raises(wb.ConfigError, match=expected.replace("(", "[(]").replace(")", "[)]").replace(".", "[.]")):
        make_job(4, **{**GOOD, **change})
print("ok")
"""


def test_keras_objects_are_checked_in_a_kernel_that_imported_keras():
    """A loss, an optimizer with a schedule and clipping, and metric objects, as a Keras user
    passes them: checked in the kernel, shipped as class and config, rebuilt the same; a
    model instance is shipped as its config, custom layers and weights (a tf.Module
    instance, which has no config, is refused)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", KERAS_IN_THE_KERNEL], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
