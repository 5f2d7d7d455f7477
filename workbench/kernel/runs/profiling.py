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

from workbench.engine import profile as engine_profile
from workbench.errors import RunTimeout
from workbench.store import RunDir

_POLL = 0.05


def servers(run: Any, rid: int, steps: int, timeout: float) -> Any:
    """Trace ``steps`` steps of a live parameter-server run on its worker and PS engines;
    one row per task (see ``Run.profile``). A worker's ``steps`` are the steps it ran while
    traced: its rows in ``run.history`` whose call ended (on its own clock) between the
    times its trace started and stopped; a PS task's are every worker's rows in its own
    trace's span. Not the step numbers the kernel saw meanwhile: they lag the steps run,
    and a loaded machine's stops came seconds after them (a worker's op kernels then
    read 1.0-1.4 of its timed step, for 0.25 unloaded)."""
    import pandas as pd

    tasks = sorted((t for t in run.tasks if t.role in ("worker", "ps")), key=lambda t: t.name)
    client = run.cluster.client
    dirs = {t.name: str(RunDir(run.run_dir).profile_dir(rid, t.name)) for t in tasks}
    started: list = []
    try:
        # every engine at once: one after the other, the first traces were started (and
        # stopped) a second or more before the last, steps the window below does not count
        replies, error = _on_all(client, engine_profile.start_trace, tasks, dirs)
        started = [t for t in tasks if t.name in replies]
        if error is not None:
            raise error
        first = run.step + 1
        deadline = time.monotonic() + timeout
        while run.step < first - 1 + steps and not run.done and time.monotonic() < deadline:
            time.sleep(_POLL)
        last = run.step  # the traces end now, not when their stops (which parse them) return
    finally:  # every profiler started is stopped, whatever went wrong
        totals, error = _on_all(client, engine_profile.stop_trace, started, dirs)
        if error is not None:
            raise error
    if last - first + 1 < steps:
        if run.failure is not None:
            raise run.failure
        raise RunTimeout(f"profile(): the run went {last - first + 1} of {steps} steps before "
                           f"{'it ended' if run.done else f'{timeout} s'} (from step {first})")
    workers = [t.name for t in tasks if t.role == "worker"]
    h = _rows_until(run, workers, max(s["until"] for s in totals.values()), timeout)
    rows = []
    for t in tasks:
        s = totals[t.name]
        span = h[h.time.between(replies[t.name], s["until"])]
        ran = span[span.worker == t.name] if t.role == "worker" else span
        per = max(len(ran), 1)
        rows.append(dict(task=t.name, first=int(ran.step.min()) if len(ran) else first,
                         last=int(ran.step.max()) if len(ran) else last, steps=len(ran), input=s["input"] / per,
                         compute=s["compute"] / per, communication=s["communication"] / per, ops=s["ops"],
                         logdir=dirs[t.name]))
    return pd.DataFrame(rows)


def _rows_until(run: Any, workers: list, until: float, timeout: float) -> Any:
    """``run.history`` once it holds every worker's calls that ended by ``until``: a row of
    each at or past it (a worker's calls are collected in order), the run's end, or
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        h = run.history
        latest = h.groupby("worker").time.max()
        if run.done or time.monotonic() > deadline or all(latest.get(w, 0.0) >= until for w in workers):
            return h
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
