"""``Run.profile`` for parameter-server runs: a TF profiler trace in the processes where
their steps execute.

A parameter-server step runs in a worker engine's ``tf.distribute.Server`` (a function the
chief's coordinator dispatches to it) and reads and updates variables in the PS engines'
servers. Those engines run no ipyparallel task while the run trains (their task returned
once the server was up), so the kernel sends each of them ``engine.profile.start_trace``,
waits until the run has gone ``steps`` steps further, and sends ``stop_trace``, which
parses the trace there. The chief, busy coordinating, is not traced: its part of a step is
the dispatch, which the anatomy counts as "other" and "waiting".
"""

from __future__ import annotations

import time
from typing import Any

from workbench.common import figures
from workbench.engine import profile as engine_profile
from workbench.errors import RunTimeout
from workbench.store import RunDir


def servers(run: Any, rid: int, steps: int, timeout: float) -> Any:
    """Trace ``steps`` steps of a live parameter-server run on its worker and PS engines;
    one row per task (see ``Run.profile``). A worker's ``steps`` are those whose calls
    ended while it was traced, each call counted by the share of its span inside the
    trace (``figures.counted``: its rows' ``time`` is its call's end on the worker's own
    clock); a PS task's, every worker's steps in its trace's span, which compares the
    workers' clocks with the PS host's (one machine here; NTP across real hosts). Not the
    step numbers the kernel saw meanwhile: they lag the steps run, and on a loaded machine
    the stops came seconds after them (CI read a worker's op kernels above its timed step)."""
    import pandas as pd

    tasks = sorted((t for t in run.tasks if t.role in ("worker", "ps")), key=lambda t: t.name)
    client = run.cluster.client
    dirs = {t.name: str(RunDir(run.run_dir).profile_dir(rid, t.name)) for t in tasks}
    deadline = time.monotonic() + timeout
    started: list = []
    try:
        # every engine at once: one after the other, the first traces were started (and
        # stopped) a second or more before the last, steps the window below does not count
        replies, error = _on_all(client, engine_profile.start_trace, tasks, dirs)
        started = [t for t in tasks if t.name in replies]
        if error is not None:
            raise error
        since = max(replies.values())  # every trace runs from here on
        while _steps_since(run.history, since) < steps and not run.done and time.monotonic() < deadline:
            time.sleep(0.2)  # a history is a DataFrame built anew
    finally:  # every profiler started is stopped, whatever went wrong
        totals, error = _on_all(client, engine_profile.stop_trace, started, dirs)
        if error is not None:
            raise error
    went = _steps_since(run.history, since)
    if went < steps:
        if run.failure is not None:
            raise run.failure
        raise RunTimeout(f"profile(): the run went {went:.0f} of {steps} steps while traced before "
                           f"{'it ended' if run.done else f'{timeout} s'}")
    workers = [t.name for t in tasks if t.role == "worker"]
    h = _rows_until(run, workers, max(s["until"] for s in totals.values()), deadline)
    rows = []
    for t in tasks:
        s, began = totals[t.name], replies[t.name]
        mine = h[h.worker == t.name] if t.role == "worker" else h
        ran = figures.counted(mine.time.values, mine.step_time.values, mine.worker.values, began, s["until"])
        inside = mine.step[mine.time.between(began, s["until"])]
        per = ran if ran > 0 else float("nan")
        rows.append(dict(task=t.name, first=inside.min() if len(inside) else float("nan"),
                         last=inside.max() if len(inside) else float("nan"), steps=ran, input=s["input"] / per,
                         compute=s["compute"] / per, communication=s["communication"] / per, ops=s["ops"],
                         logdir=dirs[t.name]))
    return pd.DataFrame(rows)


def _steps_since(h: Any, since: float) -> float:
    """The steps of every worker done since ``since`` (their calls' shares after it)."""
    return figures.counted(h.time.values, h.step_time.values, h.worker.values, since, float("inf")) if len(h) else 0.0


def _rows_until(run: Any, workers: list, until: float, deadline: float) -> Any:
    """``run.history`` once it holds every worker's calls that ended by ``until``: a row of
    each at or past it (a worker's calls are collected in order), or the run's end;
    RunTimeout past ``deadline`` (``time.monotonic()``)."""
    while True:
        h = run.history
        latest = h.groupby("worker").time.max()
        if run.done or all(latest.get(w, 0.0) >= until for w in workers):
            return h
        if time.monotonic() > deadline:
            raise RunTimeout("profile(): the rows of the steps traced did not all reach this kernel in time")
        time.sleep(0.2)  # a history is a DataFrame built anew


def _on_all(client: Any, fn: Any, tasks: list, dirs: dict) -> tuple[dict, Exception | None]:
    """``fn(logdir)`` on every task's engine at once: {task name: result} of those that
    succeeded, and the first error (None when there was none), once all have answered."""
    pending = [(t, client[t.engine_id].apply_async(fn, dirs[t.name])) for t in tasks]
    results, error = {}, None
    for t, reply in pending:
        try:
            results[t.name] = reply.get()
        except Exception as e:  # noqa: BLE001 - returned, raised by the caller
            error = error or e
    return results, error
