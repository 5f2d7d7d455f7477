"""07: kill a worker during a PS run and watch it continue; resume a sync run from its checkpoint;
kill the kernel of a run and finish that run from another kernel."""

from make_notebooks import code, md

NAME = "07_fault_tolerance"


def cells():
    return [
        md("""
# Fault tolerance

Asynchronous training tolerates a lost worker: nobody waits for it. Synchronous training
does not: every step needs every worker, so a lost worker stops the run, which must then
restart from its last checkpoint. This notebook kills real engine processes (with
`SIGKILL`, as an out-of-memory killer or a failed machine would) and watches both.
"""),
        code("""
import os
import signal
import time

import workbench as wb

cluster = wb.Cluster(engines=4).start()
digits = wb.datasets.digits()
args = dict(model=wb.models.mlp((64, 32)), data=digits, global_batch_size=128, learning_rate=0.05)

def engine_pid(run, role, index):
    task = next(t for t in run.tasks if (t.role, t.index) == (role, index))
    return int(cluster.engines.loc[task.engine_id, "pid"])

def reported(steps):  # what "every step once" rests on: reports, distinct steps, first-last
    return f"{len(steps)} reports of {steps.nunique()} steps, {steps.min()}-{steps.max()}"

def reported_per_worker(history):
    return "; ".join(f"{w}: {reported(g.step)}" for w, g in history.groupby("worker"))
"""),
        md("""
## A parameter-server run loses a worker

Four engines: chief, `ps:0`, `worker:0`, `worker:1`. Once the run is under way, kill
`worker:1`'s engine. TensorFlow's coordinator re-runs the lost worker's unfinished steps on
`worker:0` and keeps trying the lost address; the workbench notices the dead engine, starts
the same worker task **on the same port** on a new engine, forked from the cluster's
zygote, a process that imported TensorFlow once for all its engines (where engines cannot
fork, as with GPUs, a spare engine kept ready for parameter-server runs), and the
coordinator picks it up again. The dashboard below shows the loss, the replacement in the tasks' states and the
placement picture with the new engine.
"""),
        code("""
run = cluster.train(strategy="parameter_server", workers=2, ps=1, steps=4000, checkpoint_every=1000, **args)
while run.step < 300:  # wait until the run is under way
    time.sleep(0.05)
os.kill(engine_pid(run, "worker", 1), signal.SIGKILL)
killed = time.time()
""", volatile=True),
        code("""
run.wait()
print("steps completed:", run.final_step, "of", run.job.steps)
print(f"every step reported exactly once: {sorted(run.history.step) == list(range(1, 4001))} ({reported(run.history.step)})")
print("what happened:", [k for k in run.events.kind if k.startswith("worker_")])
"""),
        code("""
run.events[run.events.kind.str.startswith("worker_")][["kind", "step", "task", "engine"]]  # when it happened
""", volatile=True),
        md("""
Steps per worker, in blocks of 500: `worker:1` stops at the kill, `worker:0` carries the
run alone until the replacement takes its first step, a few seconds later (in these blocks
that shows only as `worker:1`'s smaller share of the first ones), and from then on the two
share the steps again.
"""),
        code("""
h = run.history
h.assign(block=(h.step - 1) // 500 * 500 + 500).pivot_table(index="worker", columns="block", values="step",
                                                           aggfunc="count", fill_value=0)
""", volatile=True),
        md("""
How long the run went on one worker, and whether the replacement took its share:
"""),
        code("""
replaced = int(run.events[run.events.kind == "worker_replaced"].step.iloc[0])
back = h[(h.worker == "worker:1") & (h.step > replaced)]
after = h[h.step > replaced]
delay = back.time.min() - killed
print(f"the replacement's first step within 30 s of the kill: {delay < 30} (measured {delay:.1f} s)")
print(f"worker:1 did at least a third of the steps after its replacement: {len(back) >= len(after) / 3} "
      f"(measured {len(back) / len(after):.2f} of {len(after)} steps, from step {replaced})")
"""),
        md("""
Each worker's steps against time, as this execution measured them (where a line runs flat,
that worker took no steps), with the kill and the replacement's first step:
"""),
        code("""
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 3.2))
for worker, g in h.sort_values("time").groupby("worker"):
    ax.plot(g.time - h.time.min(), range(1, len(g) + 1), label=f"{worker}: its steps so far")
ax.axvline(killed - h.time.min(), color="#c00", ls=":", label="worker:1's engine killed")
ax.axvline(back.time.min() - h.time.min(), color="#080", ls=":", label="its replacement's first step")
ax.set(xlabel="seconds since the run's first step", ylabel="steps done", title="a PS run loses a worker and goes on")
ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))  # under the chart
fig.tight_layout()
plt.show()
"""),
        md("""
## A synchronous run loses a worker

MultiWorkerMirroredStrategy cannot go on without a worker: the other one would wait in the
next all-reduce forever. The workbench watches the engines and stops the run at once with
an error naming the lost task; `run.resume()` then starts the tasks again (on fresh
engines) from the last checkpoint, and the run ends with exactly the steps it asked for.
"""),
        code("""
sync = cluster.train(strategy="multi_worker_mirrored", workers=2, steps=2000, checkpoint_every=500, **args)
while sync.step < 700:
    time.sleep(0.05)
os.kill(engine_pid(sync, "worker", 1), signal.SIGKILL)
t0 = time.monotonic()
try:
    sync.wait()
except wb.EngineError as e:
    error, seconds = e, time.monotonic() - t0
print(str(error).split(" was lost")[0], "was lost; error raised after", round(seconds, 1), "s")
""", volatile=True),
        code("""
print(f"error names the lost task: {str(error).startswith('worker:1 (engine ')} (it begins {str(error).split(' (')[0]})")
print(f"raised within 60 s: {seconds < 60} (measured {seconds:.1f} s)")
events = sync.events
saved = int(events[events.kind == "checkpoint"].step.max())
print(f"a checkpoint to continue from (a multiple of checkpoint_every=500): {saved >= 500 and saved % 500 == 0} "
      f"(measured last checkpoint: step {saved})")
first, first_events = sync.history.copy(), sync.events.copy()  # the attempt that lost a worker
reached = int(first.step.max())  # the last step it finished
"""),
        code("""
resume_called = time.time()
resumed = sync.resume().wait()
h = resumed.history
print("final step:", resumed.final_step)
once = all(list(h[h.worker == w].step) == list(range(saved + 1, 2001)) for w in ("worker:0", "worker:1"))
print(f"resumed from the checkpoint, every step once per worker: {once} (measured {reported_per_worker(h)})")
accuracy = resumed.evaluation["test_accuracy"]
print(f"test accuracy >= 0.90: {accuracy >= 0.90} (measured {accuracy:.3f})")
"""),
        md("""
The steps between the last checkpoint and the failure were lost and redone: at most one
`checkpoint_every` interval (500 steps here). What a failure costs, predicted: the time to
notice it and restart, plus the steps since the last checkpoint done again at the run's
own pace, (failed step - checkpoint) / steps/s. The redone steps are measured on the
resumed run, from its first step's end (after its start-up) to the step the failed attempt
had reached; the restart, from `resume()` to the resumed run's first step, is measured only.

How often to checkpoint, then: each write costs its time w on every interval τ, each
failure loses about τ / 2 of work, and with a mean time between failures M the sum of the
two per second of training, w / τ + τ / (2 M), is least at **Young's interval
τ = sqrt(2 w M)** (Young 1974; Daly 2006 refines it). Each checkpoint event carries the
seconds the chief took to write it; no failure rate can be measured on one machine, so M
is assumed: a machine that fails once a day.
"""),
        code("""
import pandas as pd
from workbench.common import figures
from workbench.common.formulas import young_daly

pace = figures.history_figures(first, sync.job.global_batch_size)["steps_per_s"]  # the dashboard's steps/s
ends = h.groupby("step").time.max()
predicted_redo = (reached - saved) / pace
measured_redo = ends[reached] - ends[saved + 1]
restart = ends[saved + 1] - resume_called
print(f"the steps done twice, from the checkpoint to the failed attempt's last: at most checkpoint_every: "
      f"{0 < reached - saved <= 500} (measured {reached - saved}, steps {saved + 1}-{reached})")
print(f"redoing them took as long as the run's pace predicts, within 0.5-2: "
      f"{0.5 <= measured_redo / predicted_redo <= 2} (measured {measured_redo:.2f} s, predicted "
      f"{predicted_redo:.2f} s: {measured_redo / predicted_redo:.2f})")
print(f"the failure's cost (measured {seconds:.1f} s to raise, {restart:.1f} s to restart, {measured_redo:.2f} s redone)")
writes = pd.concat([first_events, resumed.events])
w = float(writes[writes.kind == "checkpoint"].seconds.median())
mtbf = 24 * 3600.0  # assumed: a machine that fails once a day
tau = young_daly(w, mtbf)  # sqrt(2 w M), the workbench's formula (workbench/common/formulas.py)
print(f"Young's interval sqrt(2 w M) for M = 1 day, predicted from the write time measured here "
      f"(measured w {w * 1e3:.0f} ms: a checkpoint every {tau:.0f} s, {tau * pace:,.0f} steps at this run's "
      f"pace, the writes then {w / tau:.2%} of the time)")

fig, ax = plt.subplots(figsize=(7, 3.2))
start = first.time.min()
for label, g in (("the attempt that lost worker:1", first), ("resumed from the checkpoint", h)):
    e = g.groupby("step").time.max()
    ax.plot(e.values - start, e.index, label=label)
ax.axhline(saved, color="#888", ls=":", lw=1, label=f"the last checkpoint (step {saved})")
ax.set(xlabel="seconds since the run's first step", ylabel="step", title="a synchronous run loses a worker")
ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2))  # under the chart
fig.tight_layout()
plt.show()
"""),
        md("""
Checkpoint more often to lose less, at the price of the time each save takes.
"""),
        md("""
## The kernel dies

A kernel can die too: out of memory, a crash, a restart. A local cluster goes with it (a
reaper process ends its engines within seconds), but the run's directory stays: its
checkpoints, its metrics, and the job itself, model and data functions included. Here a
second Python process stands in for a notebook kernel: it starts its own cluster and a
synchronous run, and we `SIGKILL` it once the run has saved a checkpoint.
"""),
        code("""
import subprocess
import sys

from workbench.store import RunDir

KERNEL = '''
import time
import workbench as wb
cluster = wb.Cluster(engines=2).start()
run = cluster.train(wb.models.mlp((64, 32)), wb.datasets.digits(), strategy="multi_worker_mirrored", workers=2,
                    steps=100_000, checkpoint_every=500, global_batch_size=128, learning_rate=0.05,
                    dashboard=False)
print(run.run_dir, flush=True)
time.sleep(3600)
'''
kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True)
run_dir = kernel.stdout.readline().strip()
while (RunDir(run_dir).checkpoint_step() or 0) < 500:  # until it has saved a checkpoint
    time.sleep(0.05)
kernel.kill()  # SIGKILL: no atexit, no clean-up
kernel.wait()
run_id = os.path.basename(run_dir)
engines = set(wb.load(run_id).placement.pid.dropna())  # the dead kernel's engine processes
while any(os.path.exists(f"/proc/{pid}") for pid in engines):  # its reaper ends them
    time.sleep(0.1)
run_id
""", volatile=True),
        md("""
Every kernel sees the run, `lost`: its kernel died before it could record an end.
`wb.load` reads it back from its directory (a unique prefix of its id is enough), with its
history and the step of its last checkpoint.
"""),
        code("""
lost = wb.load(run_id)
print("status:", lost.status)
print("history read back, both workers:", sorted(set(lost.history.worker)))
print(f"a checkpoint to continue from: {lost.checkpoint >= 500} (measured step {lost.checkpoint})")
"""),
        md("""
This kernel picks it up: `cluster.resume` continues the run on this notebook's cluster
from its last checkpoint, in the same run directory, to exactly the steps asked for. The
steps the dead kernel's engines did after that checkpoint are done again, once: its
history, read from the directory, has every step once per worker, across both kernels.
"""),
        code("""
finished = cluster.resume(run_id, steps=4000).wait()
full = wb.history(run_id)
print("final step:", finished.final_step)
print("every step once per worker, across both kernels:",
      all(list(full[full.worker == w].step) == list(range(1, 4001)) for w in ("worker:0", "worker:1")),
      f"({reported_per_worker(full)})")
print("status now:", wb.load(run_id).status)
accuracy = finished.evaluation["test_accuracy"]
print(f"test accuracy >= 0.90: {accuracy >= 0.90} (measured {accuracy:.3f})")
"""),
        code("""
cluster.stop()
"""),
    ]
