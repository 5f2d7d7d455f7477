"""What each strategy is lives in one place (``workbench.common.strategies``), without
TensorFlow; each has one engine adapter of the same name; nothing else in the package
compares strategy names."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.common import strategies
from workbench.engine import strategies as adapters

PACKAGE = Path(workbench.__file__).parent


def test_every_spec_has_an_adapter_and_every_adapter_a_spec():
    files = sorted(p.stem for p in (PACKAGE / "engine" / "strategies").glob("[a-z]*.py"))
    assert files == strategies.names()
    for name in strategies.names():
        module = adapters.adapter(name)
        assert module.SPEC is strategies.spec(name) and callable(module.train)
    with pytest.raises(KeyError):
        adapters.adapter("no_such_strategy")


def test_the_specs_import_without_tensorflow():
    code = ("import sys; from workbench.common import strategies; "
            "import workbench.engine.strategies as a; [a.adapter(n) for n in strategies.names()]; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


@pytest.mark.parametrize("name,workers,ps,counts,replicas", [
    ("multi_worker_mirrored", 3, 0, {"worker": 3}, 3),
    ("parameter_averaging", 2, 0, {"worker": 2}, 2),
    ("parameter_server", 2, 2, {"chief": 1, "ps": 2, "worker": 2}, 1),
    ("mirrored", 1, 0, {"local": 1}, 4),  # devices=4: one replica per logical device
    ("single", 1, 0, {"local": 1}, 1),
])
def test_roles_engines_and_replicas(name, workers, ps, counts, replicas):
    spec = strategies.spec(name)
    assert spec.role_counts(workers, ps) == counts
    assert list(spec.role_counts(workers, ps)) == list(spec.roles)  # launch order
    assert spec.engines(workers, ps) == sum(counts.values())
    assert spec.replicas(workers, devices=4) == replicas


def test_what_each_strategy_is():
    table = {n: (s.multi_engine, s.synchronous, s.servers, s.shards_variables, s.averages, s.logical_devices,
                 s.elastic, s.chief_role, s.splits_model, s.lockstep) for n, s in strategies.SPECS.items()}
    assert table == {
        "multi_worker_mirrored": (True, True, False, False, False, False, ("workers",), None, False, True),
        "parameter_server": (True, False, True, True, False, False, ("workers", "ps"), "chief", False, False),
        "parameter_averaging": (True, True, False, False, True, False, (), None, False, True),
        "model_parallel": (True, False, True, False, False, False, (), "chief", True, True),
        "mirrored": (False, False, False, False, False, True, (), None, False, False),
        "single": (False, False, False, False, False, True, (), None, False, False),
    }
    # a split model's first stage reads every batch: one shard of the data, not one per worker
    assert strategies.spec("model_parallel").shards(3) == 1 and strategies.spec("parameter_server").shards(3) == 3


def test_default_steps_per_execution():
    pss, mwms = strategies.spec("parameter_server"), strategies.spec("multi_worker_mirrored")
    assert [pss.default_steps_per_execution(s) for s in (1, 999, 1000)] == [10, 10, 20]
    assert mwms.default_steps_per_execution(10**6) == 10


def test_a_spec_refuses_an_unknown_role():
    with pytest.raises(ValueError, match="must be among"):
        strategies.StrategySpec(name="x", roles=("coordinator",), description="", multi_engine=False,
                                synchronous=False)


def test_no_strategy_name_is_compared_outside_the_specs():
    """``spec.synchronous``, not ``strategy == "multi_worker_mirrored"``: adding a strategy
    means a spec and an adapter, not a hunt for comparisons."""
    names = "|".join(strategies.names())
    compared = re.compile(rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    looked_up = re.compile(r"\b\w*strategies\.get\(|_ELASTIC|\.ROLES\b|SYNC_WORKERS|MULTI_ENGINE")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "common" / "strategies.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if compared.search(line) or looked_up.search(line):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_kernel_reads_strategies_from_the_specs_not_the_engine_adapters():
    importers = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
                 if "engine" not in p.relative_to(PACKAGE).parts[:1]
                 and re.search(r"^\s*(from workbench\.engine import[^\n]*\bstrategies\b|"
                               r"(from|import) workbench\.engine\.strategies)", p.read_text(), re.M)]
    assert importers == []
