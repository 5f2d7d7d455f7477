"""``Run.profile(steps=N)`` on the engines: a TF profiler trace of N steps of a live run,
and its summary by the step anatomy's categories.

The kernel cannot send a task to an engine that is training (ipyparallel runs one task at
a time), so it asks through a file, as ``stop`` does: ``<run_dir>/PROFILE`` names the step
the trace starts at (a chunk boundary a little ahead, the same for every worker) and how
many steps it covers. Each training task checks it between calls, traces
(``tf.profiler.experimental``) into ``<run_dir>/profile/<id>/<task>`` (openable in
TensorBoard's profile plugin or XProf where installed), parses its own trace (the XPlane
protobuf) and publishes a ``profile`` event with the summary.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING, Any

from workbench.store import RunDir

if TYPE_CHECKING:
    from workbench.engine.loop import Training

INPUT = ("IteratorGetNext", "MultiDeviceIterator", "AnonymousIteratorV", "IteratorV2")
COMMUNICATION = ("Collective", "_Send", "_Recv", "_HostSend", "_HostRecv", "RemoteCall", "NcclAllReduce")
# an op kernel's event is named "<op name>:<op type>"; executor bookkeeping ("ExecutorState::Process",
# "CollectiveOpV2Kernel::Run") and Python-side events are not ops
OP = re.compile(r"^[^:\s]+:([A-Za-z_]\w*)$")
# events named like ops that are not: a server's handling of a remote call (on a parameter-server
# worker it spans the whole dispatched function)
NOT_OPS = ("EagerService:",)
# the consumer's wait for the next batch: an asynchronous kernel whose op event is not traced
# under its own name; this event on the tf.data thread spans it
INPUT_EVENTS = ("IteratorGetNextOp::DoCompute",)
# the training function's calls, as the Python thread's events name them (both synchronous
# loops call theirs ``run_steps``; ``run_steps_and_agree`` also agrees on stopping, its
# collective under the ``AGREEMENT`` name scope, left out): only what runs inside them is counted
CALLS = ("run_steps", "run_steps_and_agree")
AGREEMENT = "stop_agreement"


def category(op_type: str) -> str:
    """The anatomy's category of one executed op (by its type)."""
    if op_type.startswith(INPUT):
        return "input"
    if op_type.startswith(COMMUNICATION):
        return "communication"
    return "compute"


def _union(intervals: list) -> float:
    """Total length of the union of (start, end) intervals."""
    total, reach = 0, None
    for begin, end in sorted(intervals):
        if reach is None or begin > reach:
            total += end - begin
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def intervals(space: Any) -> tuple[dict[str, list], int]:
    """The (start, end) picoseconds of every op event in an XSpace by category, clipped
    to the training function's calls when the trace has them; and the number of ops."""
    spans: dict[str, list] = {"input": [], "compute": [], "communication": []}
    ops = 0
    for plane in space.planes:
        names = plane.event_metadata
        calls = [(line.timestamp_ns * 1000 + e.offset_ps, line.timestamp_ns * 1000 + e.offset_ps + e.duration_ps)
                 for line in plane.lines if line.name == "python"
                 for e in line.events if names[e.metadata_id].name in CALLS]
        for line in plane.lines:
            if line.name == "python":
                continue
            base = line.timestamp_ns * 1000
            for event in line.events:
                name = names[event.metadata_id].name
                if name in INPUT_EVENTS:
                    kind = "input"
                else:
                    m = OP.match(name)
                    if m is None or name.startswith(NOT_OPS) or AGREEMENT in name:
                        continue
                    kind = category(m.group(1))
                begin = base + event.offset_ps
                end = begin + event.duration_ps
                if calls:  # only what ran inside a call, clipped to it
                    inside = [(max(begin, a), min(end, b)) for a, b in calls if begin < b and end > a]
                    if not inside:
                        continue
                    begin, end = inside[0]
                spans[kind].append((begin, end))
                ops += 1
    return spans, ops


def summarize(logdir: str, steps: int) -> dict[str, Any]:
    """Seconds per step in which at least one op of each category ran (the union of the
    ops' spans, so ops running at once on several threads count once: comparable with the
    anatomy's timers, which read wall time), counted inside the training function's calls
    (not the stop agreement's collective, between them or at their end) when the trace has them, and the
    number of ops. Communication ops are asynchronous: their span runs from the kernel's
    start to its completion, a wait for a slower peer included."""
    import glob

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals = {"input": 0.0, "compute": 0.0, "communication": 0.0}
    ops = 0
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        spans, n = intervals(space)
        ops += n
        for kind, found in spans.items():
            totals[kind] += _union(found) * 1e-12
    return {"steps": steps, "ops": ops, **{k: v / max(steps, 1) for k, v in totals.items()}}


class Profiling:
    """One task's side of ``Run.profile``: ``check(done)`` after every call."""

    def __init__(self, t: Training) -> None:
        self.t = t
        self.run_dir = RunDir(t.job.run_dir)
        self.handled: set = set()
        self.active: dict | None = None

    def check(self, done: int) -> None:
        import tensorflow as tf

        if self.active is not None:
            if done >= self.active["start"] + self.active["steps"]:
                tf.profiler.experimental.stop()
                req, self.active = self.active, None
                steps = done - req["began"]
                self.t.pub.event("profile", id=req["id"], task=self.t.ctx.name, logdir=req["logdir"],
                                 first=req["began"] + 1, last=done, **summarize(req["logdir"], steps))
            return
        req = self.run_dir.profile_request()
        if req is None or req["id"] in self.handled or done < req["start"]:
            return
        self.handled.add(req["id"])
        logdir = str(self.run_dir.profile_dir(req["id"], self.t.ctx.name))
        os.makedirs(logdir, exist_ok=True)
        tf.profiler.experimental.start(logdir)
        self.active = dict(req, logdir=logdir, began=done)

    def close(self) -> None:
        """The run ended while tracing: stop the profiler (the trace is kept, not summarised)."""
        if self.active is not None:
            import tensorflow as tf

            tf.profiler.experimental.stop()
            self.active = None


# -- parameter-server runs ------------------------------------------------------------------
# Their steps execute in the worker engines' tf.distribute.Server (functions the chief's
# coordinator dispatches), and their variables live in the PS engines' servers: those engines
# run no ipyparallel task while the run trains, so the kernel starts and stops a trace in
# each of their processes directly (``kernel/profiling.py``).

def start_trace(logdir: str) -> float:
    """Start TF's profiler in this engine's process (its server's threads included); the
    time (this host's clock) from which it traces."""
    import tensorflow as tf

    os.makedirs(logdir, exist_ok=True)
    tf.profiler.experimental.start(logdir)
    return time.time()


def stop_trace(logdir: str) -> dict[str, Any]:
    """Stop the profiler started by ``start_trace``; the trace's seconds in each category
    (in total: the kernel divides by the steps this task ran meanwhile), its ops, and the
    time (this host's clock) up to which it traced, ``until``."""
    import tensorflow as tf

    until = time.time()
    tf.profiler.experimental.stop()
    return {**summarize(logdir, 1), "until": until}
