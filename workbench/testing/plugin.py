"""The workbench's pytest plugin: ``pytest --nbval`` on notebooks that use the workbench.

Installed with the package (entry point ``pytest11: workbench``), loaded by every pytest of
that environment; it acts only on the notebooks nbval collects whose cells import the
workbench (``import workbench``, ``from workbench ...``, ``%load_ext workbench``):

- their outputs are compared through the workbench's sanitizers (``sanitize.py``), ahead
  of a ``--nbval-sanitize-with`` file's own, a run's reproducible figures within their
  tolerances (``sanitize.tolerate``);
- nbval waits up to ``--wb-output-timeout`` seconds (default 30) for a cell's outputs
  after its reply, instead of its fixed 5 (a loaded machine, a kernel busy with widgets);
- consecutive ones share one local cluster (``testing/lender.py``): a notebook's
  ``wb.Cluster(...)`` borrows its engines, which are made fresh again after each notebook
  (a run it left training stopped, engines holding TensorFlow state replaced), and the
  cluster stops before the next test that is not such a notebook and at the session's
  end, failed notebooks or not.

Opt out with ``-p no:workbench`` (the whole plugin), ``--wb-no-sanitize`` or
``--wb-no-shared-cluster``. nbval (0.11) offers no hooks: the plugin fills each workbench
notebook's ``sanitize_patterns`` and each of its cells' ``output_timeout``, nbval's own
attributes, once nbval has collected them.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

_USES_WORKBENCH = re.compile(r"^\s*(?:import\s+workbench\b|from\s+workbench\b|%load_ext\s+workbench\b)", re.M)
_LENDER = pytest.StashKey[Any]()  # the session's Lender (testing/lender.py), once a notebook asks
_USES = pytest.StashKey[bool]()  # a notebook uses the workbench
_SANITIZED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("workbench", "notebooks that use the workbench, under nbval")
    group.addoption("--wb-no-sanitize", action="store_true",
                    help="compare workbench notebooks' outputs as they are (no workbench sanitizers)")
    group.addoption("--wb-no-shared-cluster", action="store_true",
                    help="each notebook's wb.Cluster starts its own cluster instead of the session's")
    group.addoption("--wb-output-timeout", type=float, default=30.0, metavar="SECONDS",
                    help="how long nbval waits for a workbench notebook cell's outputs after its reply (default 30)")


def _workbench_notebook(item: pytest.Item) -> Any:
    """The nbval notebook (``IPyNbFile``) of ``item`` if it is a cell of one that uses the
    workbench, else None."""
    parent = item.parent
    nb = getattr(parent, "nb", None)
    if type(item).__name__ != "IPyNbCell" or nb is None:
        return None
    if _USES not in parent.stash:
        parent.stash[_USES] = any(c.cell_type == "code" and _USES_WORKBENCH.search(c.source) for c in nb.cells)
    return parent if parent.stash[_USES] else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from workbench.testing.sanitize import PATTERNS

    for item in items:
        notebook = _workbench_notebook(item)
        if notebook is None:
            continue
        item.output_timeout = max(item.output_timeout, config.option.wb_output_timeout)
        if not config.option.wb_no_sanitize and not notebook.stash.get(_SANITIZED, False):
            notebook.stash[_SANITIZED] = True
            # nbval adds a --nbval-sanitize-with file's patterns to the same dict when the
            # notebook starts: after these, in order
            notebook.sanitize_patterns.update(PATTERNS)
        if not config.option.wb_no_sanitize:
            item.compare_outputs = _tolerant(item.compare_outputs)


def _tolerant(compare: Any) -> Any:
    """nbval's ``compare_outputs(new, saved)`` of a cell, given each new output's figures
    written as the saved output of the same kind (a stream by its name, a display, a
    result; in order) writes them where they are close (``sanitize.tolerate``)."""
    from workbench.testing.sanitize import tolerate

    def tolerated(new: dict, saved: dict) -> dict:
        out = type(new)(new)  # nbval reads outputs' fields as attributes (nbformat's NotebookNode)
        if isinstance(new.get("text"), str) and isinstance(saved.get("text"), str):
            out["text"] = tolerate(new["text"], saved["text"])
        if isinstance(new.get("data"), dict) and isinstance(saved.get("data"), dict):
            out["data"] = type(new["data"])({mime: tolerate(v, saved["data"][mime]) if isinstance(v, str) and isinstance(
                saved["data"].get(mime), str) else v for mime, v in new["data"].items()})
        return out

    def kind(output: dict) -> tuple:
        return output.get("output_type"), output.get("name")

    def compare_outputs(test: list, ref: list, skip_compare: Any = None) -> bool:
        saved = {}  # each new output against the saved one of its kind (stdout, stderr, a display) in order
        for r in ref:
            saved.setdefault(kind(r), []).append(r)
        near = [tolerated(t, saved[kind(t)].pop(0)) if saved.get(kind(t)) else t for t in test]
        return compare(near, ref, skip_compare)

    return compare_outputs


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """While a workbench notebook's kernel starts (nbval starts it with the first cell):
    the session's cluster offered to it, through the environment the kernel inherits. Only
    then: other processes this pytest starts (a test's own subprocesses) get no offer."""
    notebook = _workbench_notebook(item)
    offer = {}
    if notebook is not None and notebook.kernel is None and not item.config.option.wb_no_shared_cluster:
        if item.config.stash.get(_LENDER, None) is None:
            from workbench.testing.lender import Lender

            item.config.stash[_LENDER] = Lender()
        offer = item.config.stash[_LENDER].environ()
    os.environ.update(offer)
    try:
        yield
    finally:
        for name in offer:
            os.environ.pop(name, None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After a workbench notebook's last cell, once nbval has stopped its kernel: the
    session's cluster made fresh for the next notebook, or stopped when no workbench
    notebook comes next (a test that follows finds none of its processes running)."""
    yield
    lender = item.config.stash.get(_LENDER, None)
    if lender is None or _workbench_notebook(item) is None or (
            nextitem is not None and nextitem.parent is item.parent):
        return
    if nextitem is not None and _workbench_notebook(nextitem) is not None:
        lender.reclaim()
    else:
        item.config.stash[_LENDER] = None
        lender.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    lender = config.stash.get(_LENDER, None)
    if lender is not None:
        config.stash[_LENDER] = None
        lender.stop()
