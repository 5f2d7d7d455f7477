"""Synchronous all-reduce over worker engines: MultiWorkerMirroredStrategy (SPMD).

Every worker runs this same function; all must be inside the strategy call at once.
TF_CONFIG is set on the engine before this runs.
"""

from workbench.common.job import Job
from workbench.common.strategies import spec

SPEC = spec("multi_worker_mirrored")


from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    import tensorflow as tf

    from workbench.common.protocols import TaskContext, TaskResult


def train(job: "Job", ctx: "TaskContext") -> "TaskResult":

    from workbench.engine import synchronous

    return synchronous.train(collective_strategy(f"{job.run_id}-{job.launch}"), job, ctx)


BARRIER_TIMEOUT = 600.0  # s; the kernel's start timeout (180 s) names a missing peer first


def collective_strategy(name: str) -> "tf.distribute.MultiWorkerMirroredStrategy":
    """A MultiWorkerMirroredStrategy that every worker of the run has built before any of
    them starts a collective.

    Building one again on an engine (a re-run on the same engines) makes TF replace the
    process's collective state (``enable_collective_ops`` -> the server's new collective
    executor: its table of resolved groups is empty). A worker that built its strategy
    first and went on to its first collective (the model's broadcast) got the group from
    the leader's old table; the leader then built its strategy, dropped that group, and
    the worker's next request failed: "group 1 not found. This normally means the server
    has restarted" (or a shape mismatch, or an aborted BufRendezvous). Seen in CI when the
    leader was late; reproduced every time by delaying it 1 s. A barrier of TF's
    coordination service, which that replacement leaves alone, waits for every worker's
    new strategy. ``name``: the barrier's, the same on every worker and new for each
    strategy the workers build together (a run's id and its launch's: a resume has its own).
    """
    import tensorflow as tf
    from tensorflow.python.eager import context

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if context.context().coordination_service is not None:
        context.context().wait_at_barrier(f"workbench-strategy-{name}", int(BARRIER_TIMEOUT * 1000))
    return strategy
