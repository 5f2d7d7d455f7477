"""``python -m workbench train ...``: the notebook's training runs, headless, with a progress bar.

``runs`` lists the recorded runs, ``show RUN`` prints one (a unique prefix of its id is
enough), ``logs RUN`` its tasks' output, ``stop RUN`` asks a running one to stop (keeping a
checkpoint), ``resume RUN --steps N`` continues one from its last checkpoint on a local
cluster."""

import argparse
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from workbench.common import options, validate
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.kernel.runs.handle import Run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workbench", description=__doc__.replace("``", "'"))
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="start a local cluster, train, print a summary, stop",
                       description="Cluster.train's options, on a local cluster of its own.")
    for o in options.TRAINING:  # Cluster.train's options, from their one declaration
        if o.cli:
            shown = (o.cli_help or o.help) + ("" if o.default is None else f" (default: {o.default})")
            if o.type is bool:  # --anatomy / --no-anatomy
                t.add_argument(o.flag, action=argparse.BooleanOptionalAction, default=o.default, help=shown)
            else:
                t.add_argument(o.flag, type=o.type, default=o.default, help=shown)
    t.add_argument("--engines", type=int, default=None, help="engines to start (default: what the run needs)")
    t.add_argument("--data", default="digits", help="digits | synthetic (default: %(default)s)")
    t.add_argument("--hidden", default="64,32", help="hidden layer widths, comma-separated (default: %(default)s)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    sub.add_parser("runs", help="list the runs recorded under the workbench home, newest first")
    s = sub.add_parser("show", help="one recorded run: status, steps, loss, evaluation, events, checkpoint")
    s.add_argument("run", help="a run id, or a unique prefix of one")
    lg = sub.add_parser("logs", help="a run's task output (stdout and stderr, TensorFlow's log included), "
                        "a line each with its elapsed seconds, step and task")
    lg.add_argument("run", help="a run id, or a unique prefix of one")
    lg.add_argument("--task", default=None, help="one task's lines only, for example worker:1")
    lg.add_argument("--last", type=int, default=None, help="only the newest N lines")
    st = sub.add_parser("stop", help="ask a running run to stop at its next agreed step, keeping a checkpoint, "
                        "and wait for its end")
    st.add_argument("run", help="a run id, or a unique prefix of one")
    st.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for its end (default: 60)")
    r = sub.add_parser("resume", help="continue a recorded run from its last checkpoint on a local cluster")
    r.add_argument("run", help="a run id, or a unique prefix of one")
    r.add_argument("--steps", type=int, default=None, help="total steps to reach (default: the run's own)")
    r.add_argument("--workers", type=int, default=None, help="another number of workers, where the strategy allows")
    r.add_argument("--ps", type=int, default=None, help="another number of PS tasks (parameter_server)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    return p


def _engines_needed(strategy: str, workers: int | None, ps: int | None) -> int:
    """Engines a run of ``strategy`` with ``workers`` and ``ps`` (None: the strategy's
    defaults) needs (checked already)."""
    from workbench.common import strategies

    spec = strategies.spec(strategy)
    return spec.engines(*spec.with_defaults(workers, ps))


def _model(wb, strategy, hidden, classes, workers):
    """The MLP the CLI trains: split into a stage per worker under a strategy that splits
    its model across the workers (``split_mlp``), else whole."""
    from workbench.common import strategies

    if strategy in strategies.names() and strategies.spec(strategy).splits_model:
        stages = strategies.spec(strategy).with_defaults(workers, None)[0]
        return wb.models.split_mlp(hidden, classes=classes, devices=stages)
    return wb.models.mlp(hidden, classes=classes)


def train(args: argparse.Namespace, out: TextIO = sys.stdout) -> "Run":
    import workbench as wb

    data = {"digits": wb.datasets.digits, "synthetic": wb.datasets.synthetic}.get(args.data)
    if data is None:
        raise wb.ConfigError(f"Invalid value for argument '--data'. Received: --data={args.data!r}. "
                             "Expected 'digits' or 'synthetic'.")
    try:
        hidden = tuple(int(h) for h in args.hidden.split(",") if h)
    except ValueError:
        raise wb.ConfigError(f"Invalid value for argument '--hidden'. Received: --hidden={args.hidden!r}. "
                             "Expected comma-separated ints, for example 64,32.") from None
    data = data()
    given = {o.name: getattr(args, o.name) for o in options.TRAINING if o.cli}
    model = _model(wb, args.strategy, hidden, data.classes, args.workers)
    check(model, data, given)  # refuse bad arguments before any engine starts
    engines = args.engines or _engines_needed(args.strategy, args.workers, args.ps)
    with _started(wb, engines, out) as cluster:
        return _to_the_end(lambda: cluster.train(model, data, **given), out, progress=not args.no_progress)


def list_runs(out: TextIO = sys.stdout) -> None:
    import pandas as pd

    import workbench as wb

    table = wb.runs()
    if table.empty:
        print("no runs recorded yet", file=out)
        return
    table = table.drop(columns=["run_dir", "notebook"]).copy()
    table["loss"] = table["loss"].map(lambda v: "" if pd.isna(v) else f"{v:.4f}")
    table["error"] = table["error"].fillna("").str.slice(0, 60)
    print(table.to_string(index=False), file=out)


def show(args: argparse.Namespace, out: TextIO = sys.stdout) -> "Run":
    import workbench as wb

    run = wb.load(args.run)
    print(describe(run), file=out)
    return run


def describe(run: "Run") -> str:
    """A recorded run in a few lines: what it is, where it got, how it ended."""
    h = run.history
    job = run.job
    lines = [f"run {run.id}: {job.strategy}, workers={job.workers}, ps={job.ps}",
             f"  status         {run.status}" + (f": {run.error}" if run.error else ""),
             f"  steps          {run.final_step}/{job.steps}"]
    if len(h):
        lines.append(_final_loss_line(h, run.job.first_step))
    for name, value in (run.evaluation or {}).items():
        if name.startswith("test_"):
            lines.append(f"  {name.replace('_', ' '):<14} {value:.4f}")
    saved = run.checkpoint
    lines.append("  checkpoint     " + (f"step {saved}" if saved is not None else "none"))
    ev = run.events
    if len(ev):
        counts = ev.kind.value_counts()
        lines.append("  events         " + ", ".join(f"{k} x{v}" for k, v in counts.items()))
    lines.append(f"  run directory  {run.run_dir}")
    return "\n".join(lines)


def logs(args: argparse.Namespace, out: TextIO = sys.stdout) -> "Run":
    """The run's log lines (``run.logs()``), read from its files: a line each."""
    import workbench as wb
    from workbench.common import logs as tasklogs

    run = wb.load(args.run)
    out.write(tasklogs.text(run.logs(task=args.task, last=args.last)))
    return run


def stop(args: argparse.Namespace, out: TextIO = sys.stdout) -> "Run":
    """The run's STOP file, as the panel writes it; the kernel watching the run sees it
    (and forwards it through ipyparallel to engines on hosts that do not see the file).
    Waits for that kernel to record the run's end."""
    import workbench as wb
    from workbench.errors import RunStopped, invalid

    timeout = validate.positive_float("timeout", args.timeout)
    run = wb.load(args.run)
    if run.status != "running":
        raise invalid("run", args.run, "a running run", f"Run {run.id} is {run.status}.")
    run.stop(timeout=timeout)
    if run.status == "running":
        raise RunStopped(f"Run {run.id} asked to stop, but still running {timeout:g} s later: the kernel watching "
                         f"it has not recorded its end (step {run.step}/{run.job.steps}).")
    print(describe(run), file=out)
    return run


def resume(args: argparse.Namespace, out: TextIO = sys.stdout) -> "Run":
    import workbench as wb
    from workbench.kernel.runs.recorded import resume_job

    # the resume's checks, before any engine starts (Cluster.resume makes them again)
    job, steps = resume_job(args.run, steps=args.steps, workers=args.workers, ps=args.ps)
    with _started(wb, _engines_needed(job.strategy, job.workers, job.ps), out) as cluster:
        return _to_the_end(lambda: cluster.resume(job.run_dir, steps=steps, workers=args.workers, ps=args.ps),
                           out, progress=not args.no_progress)


def check(model: Callable, data: object, given: dict[str, object]) -> None:
    """Refuse bad training options as ``Cluster.train`` would, before any engine starts."""
    from workbench.kernel.runs.job import make_job

    job_options = {name: value for name, value in given.items() if options.BY_NAME[name].job}
    make_job(None, model=model, data=data, **job_options)
    for name in ("stall_timeout", "start_timeout"):  # checked by Cluster.train too, once engines are up
        if name in given:
            validate.positive_float(name, given[name])


def _say(out, text):
    print(text, file=out, flush=True)


def _started(wb, engines, out):
    """A started local cluster, saying what it does meanwhile: the first output comes at
    once, not after the ~10 s of engines importing TensorFlow. A Ctrl-C meanwhile ends what
    had started (``Cluster.start``) and goes on as KeyboardInterrupt."""
    _say(out, f"starting a local cluster: a controller and {engines} engines (each imports TensorFlow) ...")
    t0 = time.monotonic()
    try:
        cluster = wb.Cluster(engines=engines).start()
    except KeyboardInterrupt:
        _say(out, "interrupted: the cluster was stopped before it was ready")
        # an interrupted connect leaves ipyparallel's pending task, which asyncio would
        # report as this process exits ("Task was destroyed but it is pending!")
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        raise
    _say(out, f"{engines} engines ready in {time.monotonic() - t0:.1f} s")
    return cluster


def _to_the_end(start, out, progress):
    """The run ``start()`` launches, followed to its end, with its summary. A Ctrl-C
    meanwhile stops it as in a notebook (``Run.stop_interrupted``: every task at one agreed
    step, with a checkpoint), prints its summary, then goes on as KeyboardInterrupt (exit
    code 130). Until then SIGINT only sets a flag that the loop following the run reads: a
    KeyboardInterrupt raised wherever this thread happens to be could leave the launch or
    the run's tables half done. A second Ctrl-C, while the run stops, raises at once."""
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.set())
    try:
        run = start()
        _follow(run, out, progress, interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted.is_set():
        run.stop_interrupted()
        print(summary(run), file=out)
        raise KeyboardInterrupt
    print(summary(run), file=out)
    return run


def _follow(run, out, progress, interrupted):
    """Progress while the run trains: a line when it starts, at its first step, then a bar of
    steps, until it ends (``run.wait()`` raises its error) or ``interrupted`` is set. The
    bar's rate is the workbench's steps/s (``common/figures.py``), not tqdm's count of bar
    updates: while training, over the steps that ended in the last few seconds; once the
    run ends, the whole run's figure, the one the summary prints."""
    from tqdm import tqdm

    from workbench.common import figures

    _say(out, f"run {run.id} started ({run.job.strategy}, {run.job.steps} steps); waiting for the first step ...")
    t0 = time.monotonic()
    while not run.done and not len(run.history) and not interrupted.is_set():
        run.join(0.05)
    if len(run.history):
        _say(out, f"first step after {time.monotonic() - t0:.1f} s")

    def show(bar, h, rate, where):
        bar.update(int(h.step.max()) - bar.n if len(h) else 0)
        rate_text = f"steps/s {figures.TOO_SHORT}" if rate != rate else f"{rate:,.1f} steps/s"
        loss = f"loss {figures.final_loss(h.step.values, h.loss.values, run.job.first_step):.4f}, " if len(h) else ""
        bar.set_postfix_str(f"{loss}{rate_text} ({where})")

    # tqdm writes the postfix's ", " itself; the bar leaves the terminal's last column free
    # (terminals wrap or cut a line that fills it), and the loss leads the postfix: where
    # the terminal is too narrow for the line, tqdm cuts its end
    with tqdm(total=run.job.steps, unit="step", file=out, disable=not progress, dynamic_ncols=True,
              bar_format="{l_bar}{bar:-1}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
              initial=int(run.history.step.max()) if len(run.history) else 0) as bar:
        while not run.done and not interrupted.is_set():
            h = run.history
            show(bar, h, figures.recent_steps_per_s(h.step.values, h.time.values),
                 f"last {figures.RECENT_S:.0f} s")
            run.join(0.2)
        if interrupted.is_set():
            return  # the bar stays where the run was
        run.wait()  # every row is in: the bar ends on the summary's figure
        h = run.history
        first = run.job.first_step
        show(bar, h, figures.history_figures(h, run.job.global_batch_size, first)["steps_per_s"], figures.scope(first))


def _final_loss_line(h, first_step):
    from workbench.common import figures

    return (f"  final loss     {figures.final_loss(h.step.values, h.loss.values, first_step):.4f} "
            f"(mean of the last {figures.LAST_STEPS} steps)")


def summary(run: "Run") -> str:
    """The run in a few lines; steps/s, examples/s, step time and wall time by their one
    definition (``common/figures.py``), the numbers ``wb.compare``, the dashboard and the
    panel give for the run (a resumed run's: its newest attempt's)."""
    from workbench.common import figures

    h = run.history
    first = run.job.first_step
    lines = [f"run {run.id}: {run.job.strategy}, workers={run.job.workers}, ps={run.job.ps}",
             f"  steps          {run.final_step}/{run.job.steps}" + (" (stopped)" if run.stopped else "")]
    if len(h):
        fig = figures.history_figures(h, run.job.global_batch_size, first)
        per_worker = h[h.step >= first].groupby("worker").examples_per_s.median()
        scope = "after the first fifth of the run" if first <= 1 else \
            f"after the first fifth of the steps since the resume at step {first - 1}"
        lines.append(_final_loss_line(h, first))
        own = f"each worker's own, median: {', '.join(f'{w} {v:,.0f}' for w, v in per_worker.items())}"
        if fig["steps_per_s"] == fig["steps_per_s"]:
            lines.append(f"  steps/s        {fig['steps_per_s']:,.1f} (global steps per second of wall time, {scope})")
            lines.append(f"  examples/s     {fig['examples_per_s']:,.0f} (steps/s x global batch "
                         f"{run.job.global_batch_size}); {own}")
        else:  # NaN: fewer than figures.MIN_ENDS distinct step ends
            lines.append(f"  steps/s        {figures.TOO_SHORT} (fewer than {figures.MIN_ENDS} distinct step ends "
                         f"{scope})")
            lines.append(f"  examples/s     {figures.TOO_SHORT}; {own}")
        lines.append(f"  step time      {fig['step_time'] * 1000:.2f} ms (median of a worker's seconds per step as it "
                     "timed them: 1 / step time is not steps/s)")
        lines.append(f"  wall time      {fig['wall_time']:.1f} s (first to last step)")
    for name, value in (run.evaluation or {}).items():
        if name.startswith("test_"):
            lines.append(f"  {name.replace('_', ' '):<14} {value:.4f}")
    lines.append(f"  run directory  {run.run_dir}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = {"train": train, "runs": lambda a: list_runs(), "show": show, "logs": logs, "stop": stop,
               "resume": resume}[args.command]
    try:
        command(args)
    except WorkbenchError as e:
        print(f"error: {_in_cli_terms(str(e), args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what it stopped has said so; 128 + SIGINT, as shells say it
        return 130
    return 0


def _in_cli_terms(message, args):
    """An API message in the terms the user typed: argument 'ps' is the option --ps."""
    for dest in set(vars(args)) - {"command", "run"}:  # options, not positional arguments
        flag = "--" + dest.replace("_", "-")
        message = re.sub(rf"\bargument '{dest}'", f"argument '{flag}'", message)
        message = re.sub(rf"Received: {dest}=", f"Received: {flag}=", message)
    return message
