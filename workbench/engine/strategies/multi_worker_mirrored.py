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
# s without a task's heartbeat before TF's coordination service aborts every collective
# (TF's default is 10 s). One worker stalled 15 s (SIGSTOP) failed a 2-worker run under
# the default ("stopped sending heartbeats"), as CI's busy 2 cores once did to
# bench/network.py; the kernel finds lost engines and hosts itself, in seconds.
HEARTBEAT_TIMEOUT = 60.0


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

    _configure_coordination()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if context.context().coordination_service is not None:
        context.context().wait_at_barrier(f"workbench-strategy-{name}", int(BARRIER_TIMEOUT * 1000))
    return strategy


def _configure_coordination() -> None:
    """TF's coordination service as MultiWorkerMirroredStrategy configures it (its leader,
    its chief and worker jobs), with ``HEARTBEAT_TIMEOUT``; the strategy leaves a service
    already configured alone. Once per process: a re-run's strategy keeps the first."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.distribute.cluster_resolver import TFConfigClusterResolver
    from tensorflow.python.eager import context

    resolver = TFConfigClusterResolver()
    if context.context().coordination_service is not None or resolver.task_type not in ("chief", "worker"):
        return
    spec = multi_worker_util.normalize_cluster_spec(resolver.cluster_spec())
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in ("chief", "worker") if job in spec.jobs]
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=jobs, heartbeat_timeout_in_ms=int(HEARTBEAT_TIMEOUT * 1000))
