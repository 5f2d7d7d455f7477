"""The training options are declared once (``workbench.common.options``): ``Cluster.train``'s
signature, what it hands to ``make_job``, ``make_job``'s defaults and the CLI's ``train``
options all agree with that declaration, so none of them can drift."""

import inspect

import pytest

import workbench as wb
from workbench import cli
from workbench.common import options
from workbench.kernel.runs import job as train


def test_cluster_train_signature_is_the_declaration():
    params = list(inspect.signature(wb.Cluster.train).parameters.values())
    assert [p.name for p in params[:3]] == ["self", "model", "data"]
    declared = [(o.name, o.default) for o in options.TRAINING]
    signature = [(p.name, p.default) for p in params[3:]]
    assert signature == declared, "Cluster.train's keywords and workbench.common.options.TRAINING differ"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[3:])


def test_cluster_train_hands_every_job_option_to_make_job(monkeypatch):
    """Each Job option reaches ``make_job`` as the user gave it (a value unlike its default),
    and nothing else does."""
    seen = {}

    class Handed(Exception):
        pass

    def fake_make_job(available, **kwargs):
        seen.update(kwargs)
        raise Handed

    monkeypatch.setattr(train, "make_job", fake_make_job)
    monkeypatch.setattr(wb.Cluster, "_require_running", lambda self: None)
    monkeypatch.setattr(wb.Cluster, "_require_idle", lambda self: None)
    given = {o.name: object() for o in options.TRAINING}
    with pytest.raises(Handed):
        wb.Cluster(engines=1).train("the model", "the data", **given)
    job_options = [o.name for o in options.TRAINING if o.job]
    assert sorted(seen) == sorted(["model", "data", *job_options])
    assert all(seen[name] is given[name] for name in job_options)


def test_make_job_takes_its_defaults_from_the_declaration(monkeypatch):
    # every declared Job option is a parameter of the function that checks them
    checked = list(inspect.signature(train._make_job).parameters)
    assert sorted(checked) == sorted(["available", "model", "data", "run_dir", *options.defaults(job_only=True)])
    seen = {}
    monkeypatch.setattr(train, "_make_job", lambda available, **kwargs: seen.update(kwargs))
    train.make_job(4, model="m", data="d", steps=7)
    assert seen == dict(options.defaults(job_only=True), model="m", data="d", run_dir=None, steps=7)
    with pytest.raises(TypeError, match="unexpected keyword argument 'stall_timeout'"):
        train.make_job(4, model="m", data="d", stall_timeout=5.0)  # Cluster.train's, not the Job's
    with pytest.raises(TypeError, match="unexpected keyword argument 'stepz'"):
        train.make_job(4, model="m", data="d", stepz=7)


def test_cli_train_options_are_the_declared_ones_with_the_same_defaults():
    args = cli._parser().parse_args(["train"])
    for o in options.TRAINING:
        if o.cli:
            assert getattr(args, o.name) == o.default, o.name
    offered = {o.name for o in options.TRAINING if o.cli}
    # the options that take Python objects only stay off the command line
    assert set(options.BY_NAME) - offered == {"variable_partitioner", "metrics", "eval_data", "dashboard"}
    args = cli._parser().parse_args(["train", "--global-batch-size", "64", "--learning-rate", "0.05",
                                     "--strategy", "parameter_server", "--ps", "1"])
    assert (args.global_batch_size, args.learning_rate, args.strategy, args.ps) == (64, 0.05, "parameter_server", 1)
