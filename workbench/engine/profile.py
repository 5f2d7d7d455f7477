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
from typing import TYPE_CHECKING, Any

from workbench.store import RunDir

if TYPE_CHECKING:
    from workbench.engine.loop import Training

INPUT = ("IteratorGetNext", "MultiDeviceIteratorGetNextFromShard", "AnonymousIteratorV", "IteratorV2")
COMMUNICATION = ("Collective", "_Send", "_Recv", "_HostSend", "_HostRecv", "RemoteCall", "NcclAllReduce")


def category(op_type: str) -> str:
    """The anatomy's category of one executed op (by its type)."""
    if op_type.startswith(INPUT):
        return "input"
    if op_type.startswith(COMMUNICATION):
        return "communication"
    return "compute"


def summarize(logdir: str, steps: int) -> dict[str, Any]:
    """Seconds per step the trace's op kernels spent in each category (ops that run at once
    on several threads each count their own time), and the number of ops."""
    import glob

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals = {"input": 0.0, "compute": 0.0, "communication": 0.0}
    ops = 0
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            names = plane.event_metadata
            for line in plane.lines:
                if not line.name.startswith(("tf_Compute", "tf_data_iterator_get_next", "tf_inter_op")):
                    continue
                for event in line.events:
                    name = names[event.metadata_id].name
                    if ":" not in name:  # executor bookkeeping, not an op kernel
                        continue
                    totals[category(name.rsplit(":", 1)[1])] += event.duration_ps * 1e-12
                    ops += 1
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
