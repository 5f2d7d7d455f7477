"""What every training loop on an engine shares: the run's state built under a strategy
(``prepare`` -> ``Training``), evaluation, checkpoints and the end of a run (``finish``);
the replica step and ``n`` steps per ``tf.function`` call are ``step.py``'s. The loops themselves live with their
strategies: ``synchronous`` (single, mirrored, multi-worker mirrored, and parameter
averaging's lockstep) and ``strategies/parameter_server``.

Keras 3 ``fit`` fails under both multi-worker strategies, so the workbench owns a custom
loop: ``strategy.run`` inside ``tf.function``, per-replica batch = global batch / replicas,
loss averaged over the global batch."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.engine import build, control, keras_metrics, placement, rundir
from workbench.engine import step as step_fns
from workbench.engine.startup import debug
from workbench.engine.board import Board
from workbench.engine.metrics import Publisher
from workbench.store import RunDir

if TYPE_CHECKING:
    import tensorflow as tf

    from workbench.common.job import Job
    from workbench.common.protocols import Evaluation, TaskContext, TaskResult

Metrics = list  # [(column, keras metric, initial state)]: see keras_metrics.metrics


@dataclass
class Training:
    """One task's run in progress: what ``prepare`` builds and every loop passes on."""

    job: Job
    ctx: TaskContext
    pub: Publisher
    model: Any  # keras.Model | tf.Module
    opt: Any  # keras optimizer
    step: tf.Variable  # the global step, counted by every update
    start: int  # the step training starts from (a resumed run's checkpoint)
    manager: tf.train.CheckpointManager
    board: Board
    metrics: Metrics
    delay_line: list = field(default_factory=list)  # job.gradient_delay's gradients in waiting (step.delayed)


def check_loss(loss: float, step: int, worker: str, job: Job) -> None:
    """A NaN or infinite loss ends the run with an error saying so, at the step it appeared."""
    if not math.isfinite(loss):
        raise FloatingPointError(
            f"The loss became {loss} at step {step} on {worker} (learning_rate={job.learning_rate!r}, "
            f"optimizer={job.optimizer!r}): training diverged. Lower the learning rate, or check the data "
            "for NaN or infinite values.")


def stop_requested(job: Job) -> bool:
    """Asked through ipyparallel (``control``), or by the run directory's STOP file."""
    return control.stop_sent() or RunDir(job.run_dir).stop_requested()


def _checkpoint_dir(job, ctx):
    if ctx.is_chief:
        return str(RunDir(job.run_dir).checkpoints_dir)
    # MWMS: every worker must save (saving may run collectives); only the chief's is kept
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"{job.run_id}-ckpt-{ctx.name}")


def _state(strategy, job):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(job.seed)
    with strategy.scope():
        model = build.model(job)
        opt = build.optimizer(job)
        opt.build(build.trainable(model))
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        line = step_fns.delay_line(build.trainable(model), job.gradient_delay)
    build.check_fit(model, job, build.loss(job))  # the evaluation data too: now, not after training
    # a delay line's gradients in waiting are saved with the model: a resume applies them in turn
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt, step=step, **({"delayed": line} if line else {}))
    return model, opt, step, ckpt, line


def _io_options(job):
    """Where a checkpoint's files are written and read. Where variables live on the tasks
    the chief drives (parameter servers' PS tasks, a model-parallel run's workers) TF
    writes each task's variables from that task, on its host's disk; when hosts do not
    share the kernel's run directory (``job.unshared_hosts``) the chief does all the IO
    instead, so that the whole checkpoint is where the chief sends it from (and where a
    resume puts it back)."""
    import tensorflow as tf

    from workbench.common import strategies

    if job.unshared_hosts and strategies.spec(job.strategy).servers:  # variables on the served tasks
        return tf.train.CheckpointOptions(experimental_io_device="/job:chief/replica:0/task:0/device:CPU:0")
    return None


def _restore(job, ckpt):
    import tensorflow as tf

    if not job.resume:
        return 0
    checkpoints = RunDir(job.run_dir).checkpoints_dir
    latest = tf.train.latest_checkpoint(str(checkpoints))
    if latest is None:
        raise FileNotFoundError(f"resume=True but no checkpoint under {checkpoints}")
    ckpt.restore(latest, options=_io_options(job)).expect_partial()
    return int(ckpt.step.numpy())


def prepare(strategy: tf.distribute.Strategy, job: Job, ctx: TaskContext) -> Training:
    """What every training loop starts with: the metrics publisher, the model, optimizer and
    step counter built under ``strategy`` (restored when resuming), a checkpoint manager,
    the placement event, TensorBoard and the run's Keras metrics (built outside the
    strategy)."""
    import tensorflow as tf

    pub = Publisher(job.run_dir, ctx.name)
    model, opt, step, ckpt, line = _state(strategy, job)
    start = _restore(job, ckpt)
    manager = tf.train.CheckpointManager(ckpt, _checkpoint_dir(job, ctx), max_to_keep=3)
    pub.event("placement", tasks=[dict(ctx.task_row, devices=placement.devices(ctx.task))],
              variables=placement.variables(model, ctx.task, opt))
    board = Board(job.run_dir, ctx.is_chief)
    t = Training(job, ctx, pub, model, opt, step, start, manager, board, keras_metrics.metrics(job), line)
    # what a console on this engine sees while it trains (``run.console``)
    debug.track(model=model, optimizer=opt, step=step, strategy=strategy, job=job, task=ctx, training=t)
    return t


def evaluate(t: Training, step: int) -> Evaluation | None:
    """Loss, accuracy (``job.classifies``) and every metric over the evaluation data, on this
    (the chief's) process; None when the run has none."""
    job, metrics = t.job, t.metrics
    batches = build.eval_batches(job)
    if batches is None:
        return None
    import numpy as np

    lf, count, correct, loss_sum = build.loss(job), 0, 0, 0.0
    for _, metric, _ in metrics:
        metric.reset_state()
    for x, y in batches:
        pred = t.model(x, training=False) if build.keras_model(t.model) else t.model(x)
        loss_sum += float(np.sum(lf(y, pred)))
        count += len(y)
        if job.classifies:
            correct += float(np.sum(keras_metrics.accuracy(y, pred)))
        for _, metric, _ in metrics:
            metric.update_state(y, pred)
    if not count:
        return None
    result = {"step": step, "test_loss": loss_sum / count}
    if job.classifies:
        result["test_accuracy"] = correct / count
    result.update({f"test_{name}": float(metric.result()) for name, metric, _ in metrics})
    t.pub.event("eval", **result)
    t.board.scalars(step, force=True, **{k: v for k, v in result.items() if k != "step"})
    return result


def until_next(done: int, *intervals: int) -> int:
    """Steps until the next multiple of any positive interval."""
    return min([i - done % i for i in intervals if i] or [1 << 30])


def save(t: Training, done: int, **info: Any) -> None:
    """The checkpoint of step ``done``, and, from the chief, its event: the chief's is the
    run's checkpoint (the other MWMS workers save to a directory of their own that no resume
    reads; their events once said a checkpoint was at a step the chief, lost, never saved).
    A chief on a host that does not see the kernel's run directory sends the checkpoint's
    files and the TensorBoard logs to the kernel first (``Publisher.send_files``): a host
    lost later loses only the steps since. The rows up to ``done`` reach the metrics file
    first: a process killed between the two left a checkpoint at step 400 and rows only to
    394 (they waited in the file's buffer), steps a resume from that checkpoint would never
    report. The event carries the seconds the chief took to write (and send) it."""
    t.pub.flush(force=True)
    started = time.monotonic()
    t.manager.save(checkpoint_number=done, options=_io_options(t.job))
    if t.ctx.is_chief and t.ctx.task.host in t.job.unshared_hosts:
        t.board.flush()
        run_dir = RunDir(t.job.run_dir)
        t.pub.send_files(done, rundir.read_files(str(run_dir.path), run_dir.checkpoint_parts(done)))
    if t.ctx.is_chief:
        t.pub.event("checkpoint", step=done, seconds=time.monotonic() - started, **info)


def finish(t: Training, done: int, stopped: bool, **checkpoint_info: Any) -> TaskResult:
    """The last checkpoint, the final evaluation (chief), the weights; the task's result."""
    import numpy as np

    save(t, done, **checkpoint_info)

    evaluation = evaluate(t, done) if t.ctx.is_chief else None
    t.board.close()
    weights = None
    if t.ctx.is_chief:
        model = t.model
        weights = [np.asarray(v) for v in (model.get_weights() if build.keras_model(model)
                                           else [w.numpy() for w in model.trainable_variables])]
    t.pub.close()
    return {"rows": t.pub.rows, "events": t.pub.events, "final_step": done, "stopped": stopped,
            "evaluation": evaluation, "weights": weights}
