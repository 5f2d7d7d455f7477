"""What a notebook test compares of the workbench's renderings.

A rendering of a run holds numbers that vary between executions (speeds, timings, the
moment a live dashboard was drawn) beside the numbers that teach (how the run ended, its
final loss and accuracy). Each rendering says on its root element (``data-wb-check``), and in
its text, what a test compares: the pytest plugin (``workbench/testing``) compares that line
instead of the rendering. The line depends on the run alone, so the saved notebook and its
re-execution give the same one wherever the run is deterministic.
"""

from __future__ import annotations

from typing import Any


def check_line(run: Any) -> str:
    """What a notebook test compares of a run's rendering (``workbench/testing``: the
    element's ``data-wb-check``, and the rendering's text): its strategy and topology, how
    it ended and, where a seeded run gives the same numbers on every execution
    (``StrategySpec.deterministic``), its final loss and test metrics. A stopped run stops
    at no fixed step; several parameter-server workers update in no fixed order: their
    numbers are shown, not compared."""
    from workbench.common import figures, strategies

    job = run.job
    line = f"workbench run {run.id}: {job.strategy} workers={job.workers} ps={job.ps}, {run.status}"
    failure = getattr(run, "failure", None)  # a live run's error (a recorded one keeps its text)
    if isinstance(failure, BaseException):
        line += f" ({type(failure).__name__})"
    if run.status != "finished":
        return line
    line += f" at step {run.final_step}/{job.steps}"
    if not strategies.spec(job.strategy).deterministic(job.workers):
        return line + f" (its numbers vary between executions: {job.workers} workers update in no fixed order)"
    h = run.history
    if len(h):
        line += f", final loss {figures.final_loss(h['step'].values, h['loss'].values):.4f}"
    for name, value in sorted((run.evaluation or {}).items()):
        if name.startswith("test_"):
            line += f", {name.replace('_', ' ')} {value:.{4 if name == 'test_loss' else 3}f}"
    return line

