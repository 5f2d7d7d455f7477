"""IPython magics, loaded with ``%load_ext workbench``: a thin layer over the API.

    %wb                              this machine's clusters and runs (the Workbench panel's table)
    %wb load RUN                     wb.load(RUN), bound to ``run``
    %wb logs RUN [--task T] [--last N]  the run's task output, a line each (run.logs())
    %wb stop RUN                     stop a running run at its next agreed step (checkpoint kept)
    %wb resume RUN --steps N         cluster.resume(RUN, steps=N) on this kernel's cluster, bound to ``run``
    %wb tensorboard RUN              TensorBoard on the run's logs (127.0.0.1); prints its URL
    %wb stacks RUN                   every task's stacks, read now while the run trains (run.stacks())
    %%wb on TASK [RUN]               the cell's code run inside TASK's engine while it trains (run.console)
    %wb --help, %wb COMMAND --help

RUN is a run id or a unique prefix of one (for ``on``: by default this kernel's one live run). Errors are the API's, shown without a traceback.
(IPython finds extensions by module name, so this lives in the package, beside the rest of
what runs in the kernel, rather than in ``extensions/``.)
"""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Usage(f"{self.prog}: {message}\n{self.format_usage()}")

    def exit(self, status=0, message=None):  # --help: printed already; nothing more to do
        raise _Done()


class _Usage(Exception):
    pass


class _Done(Exception):
    pass


def _parser():
    p = _Parser(prog="%wb", description="Clusters and runs of this machine; with no command, list them.")
    sub = p.add_subparsers(dest="command")
    for name, text in (("load", "load a recorded run and bind it to `run`"),
                       ("stop", "stop a running run at its next agreed step, keeping a checkpoint"),
                       ("tensorboard", "start TensorBoard on a run's logs and print its URL"),
                       ("stacks", "show every task's stacks, read now while the run trains")):
        sub.add_parser(name, help=text, description=text).add_argument("run", help="a run id or a unique prefix")
    lg = sub.add_parser("logs", help="print a run's task output (stdout and stderr, TensorFlow's log included)",
                        description="print a run's task output, a line each with its elapsed seconds, step and task")
    lg.add_argument("run", help="a run id or a unique prefix")
    lg.add_argument("--task", default=None, help="one task's lines only, for example worker:1")
    lg.add_argument("--last", type=int, default=None, help="only the newest N lines")
    r = sub.add_parser("resume", help="continue a recorded run from its last checkpoint on this kernel's cluster",
                       description="continue a recorded run from its last checkpoint on this kernel's cluster; "
                                   "binds the new run to `run`")
    r.add_argument("run", help="a run id or a unique prefix")
    r.add_argument("--steps", type=int, default=None, help="total steps to reach (default: the run's own)")
    r.add_argument("--workers", type=int, default=None, help="another number of workers, where the strategy allows")
    r.add_argument("--ps", type=int, default=None, help="another number of PS tasks (parameter_server)")
    r.add_argument("--cluster", default=None, help="the name of the wb.Cluster variable, when several run")
    o = sub.add_parser("on", help="(cell magic: %%%%wb on TASK) run the cell inside a task's engine while it trains",
                       description="%%%%wb on TASK [RUN]: run the cell's code inside TASK's engine (a console beside "
                                   "its training: model, optimizer, step, strategy, job, task are names there)")
    o.add_argument("task", help="a task of the run, e.g. worker:1")
    o.add_argument("run", nargs="?", default=None, help="a live run's id or prefix (default: this kernel's one live run)")
    return p


def wb(line: str, shell: InteractiveShell, cell: str | None = None) -> Any:
    """The ``%wb`` line magic, and ``%%wb on TASK`` with a ``cell``."""
    from IPython.core.error import UsageError

    from workbench.errors import WorkbenchError

    try:
        args = _parser().parse_args(shlex.split(line))
        if (cell is None) == (args.command == "on"):
            raise _Usage("%wb: 'on TASK' is the cell magic %%wb on TASK, and the cell magic takes only 'on'")
        if cell is not None:
            return _on(args, cell)
        return _COMMANDS[args.command](args, shell)
    except _Done:
        return None
    except _Usage as e:
        raise UsageError(str(e)) from None
    except WorkbenchError as e:  # the API's message, without a traceback through the magic
        raise UsageError(f"{type(e).__name__}: {e}") from None


def _overview(args, shell):
    import pandas as pd
    from IPython.display import display

    from workbench.store import Records

    state = Records().state()
    clusters = pd.DataFrame([{"cluster": c["id"], "engines": len(c.get("engines", [])),
                              "roles": ", ".join(sorted({e.get("role", "") for e in c.get("engines", [])})),
                              "profile": c.get("profile"), "notebook": c.get("notebook")} for c in state["clusters"]],
                            columns=["cluster", "engines", "roles", "profile", "notebook"])
    runs = pd.DataFrame([{"run": r["run_id"], "status": r["status"], "strategy": r["strategy"],
                          "topology": f"{r['workers']} workers" + (f", {r['ps']} ps" if r["ps"] else ""),
                          "step": f"{r['step']}/{r['steps']}",
                          "loss": None if r["loss"] is None else round(r["loss"], 4),
                          "steps/s": _rate(r),
                          "run directory": r["run_dir"]} for r in state["runs"]],
                        columns=["run", "status", "strategy", "topology", "step", "loss", "steps/s", "run directory"])
    print(f"Clusters ({len(clusters)}):" if len(clusters) else "Clusters: none running")
    if len(clusters):
        display(_Table(clusters))
    print(f"Runs ({len(runs)}), newest first:" if len(runs) else f"Runs: none recorded in {state['home']}")
    if len(runs):
        display(_Table(runs))


def _rate(run):
    """A run's steps/s as the table shows it (``common/figures.py``)."""
    from workbench.common import figures

    if run["steps_per_s"] is not None:
        return round(run["steps_per_s"], 1)
    return figures.TOO_SHORT if run["step"] else None


class _Table:
    """A table shown whole: HTML in a notebook, every column as text in a terminal."""

    def __init__(self, df):
        self.df = df

    def _repr_html_(self):
        return self.df.to_html(index=False, na_rep="")

    def __repr__(self):
        return self.df.to_string(index=False, na_rep="")


def _load(args, shell):
    import workbench as wb

    run = wb.load(args.run)
    shell.user_ns["run"] = run
    print(f"run = {run!r}")


def _logs(args, shell):
    import workbench as wb
    from workbench.common import logs as tasklogs

    print(tasklogs.text(wb.load(args.run).logs(task=args.task, last=args.last)), end="")


def _stop(args, shell):
    import workbench as wb

    run = wb.load(args.run)
    if run.done:
        print(f"Run {run.id} is not running ({getattr(run, 'status', 'done')}, step {run.final_step}).")
        return
    print(f"Stopping run {run.id} at its next agreed step...", flush=True)
    run.stop()
    print(f"Run {run.id} stopped at step {run.final_step}; its last checkpoint is in {run.run_dir}.")


def _resume(args, shell):
    from workbench.errors import ClusterError
    from workbench.kernel.engines import live
    from workbench.kernel.cluster import Cluster

    if args.cluster is not None:
        cluster = shell.user_ns.get(args.cluster)
        if not isinstance(cluster, Cluster):
            raise _Usage(f"%wb resume: --cluster {args.cluster!r} is not a wb.Cluster variable of this kernel")
    else:
        clusters = [c for c in live.clusters() if c.running]
        if len(clusters) != 1:
            raise ClusterError(f"This kernel has {len(clusters)} running clusters: "
                               + ("start one first, for example cluster = wb.Cluster(engines=3).start()" if not clusters
                                  else "name the one to use with --cluster VARIABLE"))
        cluster = clusters[0]
    run = cluster.resume(args.run, steps=args.steps, workers=args.workers, ps=args.ps)
    shell.user_ns["run"] = run
    print(f"run = {run!r}")


def _tensorboard(args, shell):
    from workbench import tensorboard
    from workbench.kernel.runs.recorded import resolve
    from workbench.store import RunDir

    run_dir = resolve(args.run)
    logdir = RunDir(run_dir).tensorboard_dir
    if not logdir.is_dir():
        raise _Usage(f"%wb tensorboard: run {run_dir.name} wrote no TensorBoard logs ({logdir} does not exist)")
    _, port = tensorboard.serve(logdir)
    print(f"TensorBoard for run {run_dir.name}: http://127.0.0.1:{port}/ (ends with this kernel)")


def _live(run_id):
    """A run live in this kernel: ``run_id`` (or prefix), else this kernel's one live run."""
    import workbench as wb
    from workbench.kernel.engines import live

    if run_id is not None:
        run = wb.load(run_id)
        if run.done or not hasattr(run, "stacks"):
            raise _Usage(f"%wb: run {run.id} is not live in this kernel ({getattr(run, 'status', 'done')})")
        return run
    runs = [r for c in live.clusters() for r in c.runs if not r.done]
    if len(runs) != 1:
        raise _Usage(f"%wb: this kernel has {len(runs)} live runs: name one (a run id or prefix)")
    return runs[0]


def _stacks(args, shell):
    from IPython.display import display

    display(_live(args.run).stacks())


def _on(args, cell):
    print(_live(args.run).console(args.task)(cell), end="")


_COMMANDS = {None: _overview, "load": _load, "logs": _logs, "stop": _stop, "resume": _resume, "tensorboard": _tensorboard,
             "stacks": _stacks}


def load_ipython_extension(ipython: InteractiveShell) -> None:
    ipython.register_magic_function(lambda line, cell=None: wb(line, ipython, cell), magic_kind="line_cell",
                                    magic_name="wb")
