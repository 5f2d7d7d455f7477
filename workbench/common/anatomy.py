"""The anatomy of a step: where each worker's wall time goes. Pure logic over step rows
(``StepRow``'s anatomy columns), shared by ``Run.anatomy()`` and the dashboard.

How it is measured (``engine/step.py``: ``step_fn`` and ``steps_fn`` with ``timed=True``):
``tf.timestamp`` ops inside the step's own ``tf.function``, each chained by control
dependencies to the ops it brackets, so they read the clock when those ops have run, not
when Python dispatched them. No extra collective, no extra copy of a tensor; the cost is a
few scalar ops per step (bench/anatomy.py measures it).

What each share includes:

- **input**: ``next(iterator)``, the wait for the step's batch (prefetched batches cost
  ~nothing). Unrolled parameter-server calls read their batches before the steps start:
  their input wait falls in **other**.
- **compute**: the forward and backward passes and the optimizer's update of local
  variables (single, mirrored, multi-worker mirrored, parameter averaging). Under
  parameter-server training the forward pass's reads of variables held by PS tasks are
  inside it too (they are interleaved with the forward ops; TF does not expose them
  apart). With ``compression``, the casts (16 bits) or the quantizing and dequantizing
  (8 bits) around the collectives count here too: CPU work, timed apart from the transfer
  (``engine/compression.py``); under parameter averaging they stay in its average.
- **communication**: the gradients' all-reduce (multi-worker mirrored, mirrored), the
  average of the replicas (parameter averaging, on the step that averages), the push of
  the gradients to the PS tasks and the update there (parameter server: from the end of
  the backward pass to the global step's increment on its PS).
- **waiting**: synchronous strategies: the part of a worker's all-reduce spent waiting for
  a slower peer. A collective ends for everyone at once, so the worker that arrived last
  waited the least: its all-reduce time is taken as the transfer itself (communication)
  for every worker of that step, and the rest of each worker's all-reduce time is waiting.
  Parameter server: the time a worker sat idle between two of its scheduled calls (waiting
  for the chief). Exact to the clock's resolution when the last worker to arrive does not
  wait; when all workers wait on a third party, that shared wait counts as communication.
  Mirrored: one worker, whose timers are its replicas' mean: a replica's wait for the
  engine's other replicas stays in communication.
- **other**: the rest of the wall time per step (``step_time``): Python between calls,
  publishing metrics, the first call's tracing, the parameter server's dispatch.

How exact, checked against TF's profiler (``run.profile``; ``tests/test_anatomy.py``
cross-checks every strategy): in traces of 50 steps (digits MLP, 2 workers, MWMS and
parameter averaging) the trace's own ``Timestamp`` ops bound a compute window of 378.5 and
376.2 us per step where the timers read 378 and 377; op kernels ran during 0.75 and 0.92
of it (the rest is the executor's scheduling between ops); the collective kernels spanned
0.82-0.90 (MWMS) and 0.54-0.89 (averaging) of the timed communication, the rest being the
packing of the gradients around the collective, its parameter resolution and, for
averaging, writing the means back. Mirrored (two logical devices of one engine): the
trace's union of both replicas' ops was 1.99-2.19 of the timers' per-replica compute, its
collective kernels 0.30-0.81 of the timed all-reduce (four runs, on a loaded machine).
Under a parameter server a worker's op kernels cover 0.40-0.64 of its timed compute and
push (two runs, two workers each): its waits for the PS task's variables are asynchronous
receives no op event spans, so there the timers see what the trace cannot attribute. The
loop's own ops (metrics, each step's outputs) are timed with no piece: they run alongside
the timed ones or fall in **other**.

A worker is a **straggler** when its busy time per step (wall minus waiting) is more than
``STRAGGLER`` (20%) above the mean of the others'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

PARTS = ("input", "compute", "communication", "waiting", "other")
COLUMNS = ("input_time", "compute_time", "comm_time", "comm_bytes")
STRAGGLER = 0.20


def has_anatomy(history: pd.DataFrame) -> bool:
    return all(c in history for c in COLUMNS[:3]) and history["compute_time"].notna().any()


def _parts(h: pd.DataFrame) -> dict:
    """Seconds in each part (``PARTS``) and the step's ``wall`` time, one array entry per
    row of ``h`` (rows with ``compute_time`` only, at least one)."""
    import numpy as np

    def col(name):
        return h[name].to_numpy(float)

    comm_time = col("comm_time")
    if "wait_time" in h and h["wait_time"].notna().any():  # parameter server: idle between calls
        wait_time = col("wait_time")
        comm, waiting = comm_time, np.where(np.isnan(wait_time), 0.0, wait_time)
    else:  # the step's transfer: the all-reduce time of the worker that arrived last
        _, s = np.unique(h.step.to_numpy(), return_inverse=True)
        transfer = np.full(s.max() + 1, np.inf)
        np.fmin.at(transfer, s, comm_time)
        transfer[np.bincount(s, weights=~np.isnan(comm_time), minlength=len(transfer)) == 0] = np.nan
        comm = transfer[s]
        waiting = comm_time - comm
    measured = {"input": col("input_time"), "compute": col("compute_time"), "communication": comm,
                "waiting": waiting}
    four = np.nansum(np.stack(list(measured.values())), axis=0)  # a NaN part counts 0
    wall = np.maximum(col("step_time"), four)
    return {**measured, "other": wall - four, "wall": wall}


def traced(first_step: int, steps_per_execution: int) -> int:
    """The last step of an attempt's first two calls, which trace its step function (a
    40-step run's first call took 14x a later one's): the steps before ``first_step`` and
    those two calls', what a figure of the attempt's steady steps leaves out."""
    return first_step - 1 + 2 * (steps_per_execution or 1)


def per_step(history: pd.DataFrame) -> pd.DataFrame:
    """Seconds per (worker, step) in each part, from the rows' columns; the history's rows
    with anatomy only."""
    h = history[history["compute_time"].notna()]
    if h.empty:
        return h.assign(**{p: [] for p in PARTS})
    return h.assign(**_parts(h))


def table(history: pd.DataFrame | None, skip: int = 0) -> pd.DataFrame:
    """One row per worker: its mean step time (s), the share of it in each part, bytes
    handed to the all-reduce per step, busy seconds per step and whether it is the run's
    straggler. ``skip``: steps left out at the start (the first call traces its function):
    empty until a step past them has come (issue 35.9: the first call alone read 246.84
    ms/step, mostly "other", in a run doing ~3).

    Summed per worker in numpy: the live dashboard rebuilds this every second from the
    whole history, and pandas' groupbys took 13-29 ms per call at 6,000 rows (the same
    numbers: tests/test_anatomy.py keeps those groupbys as the reference)."""
    import numpy as np
    import pandas as pd

    cols = ["worker", "steps", "step_time", *PARTS, "bytes_per_step", "busy", "straggler"]
    if history is None or not len(history) or not has_anatomy(history):
        return pd.DataFrame(columns=cols)
    h = history[(history.step > skip).to_numpy()]
    h = h[h["compute_time"].notna()]
    if h.empty:
        return pd.DataFrame(columns=cols)
    parts = _parts(h)
    names, w = np.unique(h.worker.to_numpy(), return_inverse=True)

    def per_worker(x):  # sums skip NaN, as pandas' do
        return np.bincount(w, weights=np.where(np.isnan(x), 0.0, x), minlength=len(names))

    n = np.bincount(w, minlength=len(names))
    walls = per_worker(parts["wall"])
    out = pd.DataFrame({"steps": n, "step_time": walls / n}, index=pd.Index(names, name="worker"))
    for p in PARTS:
        out[p] = per_worker(parts[p]) / walls
    if "comm_bytes" in h:
        sent = h["comm_bytes"].to_numpy(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["bytes_per_step"] = per_worker(sent) / np.bincount(w, weights=~np.isnan(sent), minlength=len(names))
    else:
        out["bytes_per_step"] = 0.0
    out["busy"] = (walls - per_worker(parts["waiting"])) / n
    out["straggler"] = False
    slow = straggler(out["busy"])
    if slow is not None:
        out.loc[slow, "straggler"] = True
    return out.reset_index()[cols]


def sent(history: pd.DataFrame | None) -> pd.DataFrame:
    """One row per worker that handed bytes to an all-reduce: its mean ``step_time`` (s)
    and ``bytes_per_step`` (``run.history``'s ``comm_bytes``), with or without the rest of
    the anatomy (every run that all-reduces counts its bytes); empty when nothing was sent."""
    import pandas as pd

    cols = ["worker", "step_time", "bytes_per_step"]
    if history is None or "comm_bytes" not in history:
        return pd.DataFrame(columns=cols)
    h = history.dropna(subset=["comm_bytes"])
    g = h.groupby("worker")
    out = pd.DataFrame({"step_time": g["step_time"].mean(), "bytes_per_step": g["comm_bytes"].mean()})
    return out[out.bytes_per_step > 0].reset_index()[cols]


def straggler(busy: pd.Series) -> str | None:
    """The worker whose busy time per step is more than STRAGGLER above the mean of the
    others', or None (``busy``: a Series indexed by worker)."""
    if len(busy) < 2:
        return None
    worst = busy.idxmax()
    others = busy.drop(worst).mean()
    return worst if others > 0 and busy[worst] > (1 + STRAGGLER) * others else None
