"""The pytest plugin for notebooks that use the workbench, without a kernel: what its
sanitizers replace and keep, ``wb.within``, which strategies give the same numbers on every
execution, and which notebooks the plugin configures (its entry point, its opt-outs).
tests/test_notebook_suite.py runs it on real notebooks."""

import tomllib
from pathlib import Path

import nbformat
import pytest

import workbench as wb
from workbench.common import strategies
from workbench.testing.sanitize import sanitize

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]


def test_what_varies_is_replaced_and_what_teaches_is_kept():
    seen = sanitize("run 20261126-004526-34d4ef: step time 4.55 ms (whole run) · 24,003 examples/s · "
                    "187.5 steps/s · ETA 12 s · worker:1 (engine 5, pid 12345) at 198.18.0.12:45678 · "
                    "<object at 0x7f3a2b1c9d90> in /root/.workbench/runs/20261126-004526-34d4ef/metrics "
                    "and /tmp/workbench-x/engine3 at 2026-11-26 00:45:26.123 · test accuracy 0.925 "
                    "· final loss 0.3040 · step 200/200 · 2 workers")
    assert seen == ("run RUN-ID: step time T ms (whole run) · N examples/s · N steps/s · ETA T s · worker:1 "
                    "(engine N, pid PID) at ADDRESS · <object at 0xADDRESS> in WORKBENCH_HOME/runs/RUN-ID/metrics "
                    "and /tmp/... at TIMESTAMP · test accuracy 0.925 · final loss 0.3040 · step 200/200 · 2 workers")


def test_a_rendering_is_compared_by_its_check_line_and_a_table_by_its_first_line():
    html = ('<div class="wb-snapshot" data-wb-check="workbench run 20261126-004526-34d4ef: multi_worker_mirrored '
            'workers=2 ps=0, finished at step 200/200, final loss 0.3040, test accuracy 0.925" style="x">'
            '<b>workbench run</b> · 24,003 examples/s<img alt="loss chart" src="data:image/svg+xml;base64,AAAA">\n'
            '</div>')
    text = ("<workbench run 20261126-004526-34d4ef: multi_worker_mirrored workers=2 ps=0, finished at step 200/200, "
            "final loss 0.3040, test accuracy 0.925>")
    assert sanitize(html) == sanitize(text) == text.replace("20261126-004526-34d4ef", "RUN-ID")
    cluster = "<workbench.Cluster local running, 3 engines>\n        host  pid  tf_port\nengine\n0  h  1234  23456"
    assert sanitize(cluster) == "<workbench.Cluster local running, 3 engines>"
    table = "<workbench comparison: a, b>\n     final loss  steps/s\na      0.3040    160.4"
    assert sanitize(table) == "<workbench comparison: a, b>"
    printed = "<workbench.Run 20261126-004526-34d4ef single workers=1 ps=0 done, step 5/5>\nnext line\n"
    assert sanitize(printed) == "<workbench.Run RUN-ID single workers=1 ps=0 done, step 5/5>\nnext line\n"


def test_within_shows_the_band_and_fails_outside_it():
    shown = wb.within(0.9162, 0.85, 0.97, "test accuracy")
    assert repr(shown) == "test accuracy within [0.85, 0.97] (measured 0.9162)"
    assert sanitize(repr(shown)) == "test accuracy within [0.85, 0.97] (measured ...)"
    with pytest.raises(AssertionError, match=r"test accuracy 0.712 is outside \[0.85, 0.97\]"):
        wb.within(0.712, 0.85, 0.97, "test accuracy")
    with pytest.raises(AssertionError, match="nan is outside"):
        wb.within(float("nan"), 0, 1)
    with pytest.raises(wb.ConfigError, match="Received: high=0.1"):
        wb.within(0.5, 0.2, 0.1)
    with pytest.raises(wb.ConfigError, match="Received: value='0.9'"):
        wb.within("0.9", 0, 1)


def test_which_strategies_give_the_same_numbers_on_every_execution():
    """Measured (StrategySpec.deterministic's docstring): every step's loss identical over
    three seeded runs on two clusters, but for several parameter-server workers."""
    same = {(name, workers): strategies.spec(name).deterministic(workers)
            for name in strategies.names() for workers in (1, 2)}
    assert [k for k, v in same.items() if not v] == [("parameter_server", 2)]


def test_the_package_declares_the_plugin_as_an_entry_point():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"workbench": "workbench.testing.plugin"}


def _notebook(path, source):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, path)


PLUGIN = ["-p", "no:workbench", "-p", "workbench.testing.plugin"]  # as pyproject's addopts load it


@pytest.mark.parametrize("opt_out", [[], ["--wb-no-sanitize"], ["-p", "no:workbench.testing.plugin"]])
def test_the_plugin_configures_the_notebooks_that_use_the_workbench(pytester, opt_out):
    _notebook(pytester.path / "uses.ipynb", "import workbench as wb\nwb.__version__")
    _notebook(pytester.path / "loads.ipynb", "%load_ext workbench")
    _notebook(pytester.path / "other.ipynb", "import json\nprint(1)")
    items = {item.nodeid: item for item in pytester.inline_genitems("--nbval", *PLUGIN, *opt_out)[0]}
    ours = [items["uses.ipynb::Cell 0"], items["loads.ipynb::Cell 0"]]
    other = items["other.ipynb::Cell 0"]
    active = "no:workbench.testing.plugin" not in opt_out
    assert [item.output_timeout for item in ours] == ([30.0, 30.0] if active else [5, 5])
    assert other.output_timeout == 5 and not other.parent.sanitize_patterns
    sanitized = active and not opt_out
    assert [bool(item.parent.sanitize_patterns) for item in ours] == [sanitized, sanitized]


def test_a_runs_figures_are_compared_within_their_tolerance():
    """The same seeded run reads its final loss 0.0815 on one CPU type and 0.0814 on another
    (oneDNN's kernels round differently): within ``FIGURES``' tolerances the saved figure is
    kept; a loss 10% off, or an accuracy 0.022 off, still differs."""
    from workbench.testing.sanitize import tolerate

    saved = ("<workbench run RUN-ID: parameter_server workers=1 ps=1, finished at step 3000/3000, final loss 0.0815, "
             "test accuracy 0.972, test loss 0.1021>")
    assert tolerate(saved.replace("0.0815", "0.0814").replace("0.972", "0.969").replace("0.1021", "0.1025"),
                    saved) == saved
    assert "final loss 0.0900" in tolerate(saved.replace("0.0815", "0.0900"), saved)
    assert "test accuracy 0.950" in tolerate(saved.replace("0.972", "0.950"), saved)
    assert tolerate("final loss 0.0814", "test accuracy 0.972") == "final loss 0.0814"  # not the same figures
    # only a run's check line: a printed figure elsewhere is compared as printed
    assert tolerate("test split 0.2501", "test split 0.25") == "test split 0.2501"


def test_nbval_passes_a_figure_within_its_tolerance_and_fails_one_outside(pytester):
    line = "<workbench run 20261126-004526-34d4ef: single workers=1 ps=0, finished at step 5/5, final loss {}>"
    for name, printed in (("near", "0.0814"), ("far", "0.0900")):
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell(f"import workbench\nprint({line.format(printed)!r})")
        cell.execution_count = 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=line.format("0.0815") + "\n")]
        nb.cells = [cell]
        nbformat.write(nb, pytester.path / f"{name}.ipynb")
    result = pytester.runpytest_subprocess("--nbval", "--nbval-current-env", "--wb-no-shared-cluster", *PLUGIN,
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    assert "far.ipynb::Cell 0" in result.stdout.str() and "0.0900" in result.stdout.str()
