"""08: from the local cluster to a real one (SSH, MPI, Slurm; one engine per GPU)."""

from make_notebooks import code, md

NAME = "08_scaling_out"


def cells():
    return [
        md("""
# Scaling out: from this machine to a real cluster

Everything so far ran on a local cluster the workbench started. A real cluster is the same
three pieces, started differently: an ipyparallel **controller**, **engines** on the
machines (one per GPU), and the notebook's **client**. The workbench never starts machines
itself; ipyparallel's launchers do (SSH, MPI, Slurm, PBS, LSF, ...).

**What does not change:** `cluster.train(...)` and everything after it, the strategies, the
dashboard, checkpoints, `run.history`. **What changes:** how the engines start, and which
addresses TensorFlow's servers use.
"""),
        md("""
## Two ways in

**1. Let the workbench start it through a launcher.** Any argument of `ipyparallel.Cluster`
passes through:

```python
from traitlets.config import Config

config = Config()   # options of ipyparallel's launchers, by class name
config.SSHEngineSetLauncher.engines = {"gpu1": 4, "gpu2": 4}       # 4 engines on each host
cluster = wb.Cluster(engines=8, launcher="ssh", config=config)

cluster = wb.Cluster(engines=4, launcher="mpi")                     # mpiexec -n 4 ipengine ...

config = Config()
config.SlurmEngineSetLauncher.batch_template_file = "engines.sbatch"   # your #SBATCH lines
cluster = wb.Cluster(engines=8, launcher="slurm", controller="slurm", config=config)
```

**2. Attach to a cluster someone started** (`ipcluster start --profile gpus` on a login
node, a Slurm job, a system service): name its profile.

```python
cluster = wb.Cluster(profile="gpus")   # attach; cluster.stop() then only disconnects
```

The second way runs here for real: ipyparallel itself starts a cluster in a profile of its
own (as a Slurm job would), and the workbench attaches to it.
"""),
        code("""
import ipyparallel as ipp
import workbench as wb
from IPython.paths import get_ipython_dir

# what an admin or a batch job would have started, outside the notebook
service = ipp.Cluster(n=2, profile_dir=f"{get_ipython_dir()}/profile_wbdemo", controller_ip="127.0.0.1", log_level=40)
service.start_cluster_sync()
rc = service.connect_client_sync()
rc.wait_for_engines(2, timeout=120, interactive=False)  # its engines have registered
rc.close()

cluster = wb.Cluster(profile="wbdemo").start()
print("attached:", cluster.attached, "| engines:", len(cluster.engines))
"""),
        code("""
run = cluster.train(model=wb.models.mlp((64, 32)), data=wb.datasets.digits(), strategy="multi_worker_mirrored",
                    workers=2, global_batch_size=128, steps=300, learning_rate=0.1, seed=0, dashboard=False).wait()
print(f"steps: {run.final_step}, test accuracy: {run.evaluation['test_accuracy']:.3f}")
"""),
        code("""
cluster.stop()                 # disconnects: the attached cluster belongs to whoever started it
service.stop_cluster_sync()    # ...who stops it
"""),
        md("""
## Across hosts, for real: emulated hosts on this machine

`wb.testbed(hosts=3)` makes three hosts here: each a network namespace on a private bridge,
with an address in 198.18.0.0/15 (reserved for network tests), a hostname of its own and an
sshd that admits only a key made for the bed. It needs root and Debian's `openssh-server`;
without them it says what is missing, and this section stops there.
"""),
        code("""
try:
    bed = wb.testbed(hosts=3)
except wb.TestbedError as e:
    bed = None
    print("No emulated hosts here:", e)
else:
    print("hosts:", list(bed.hosts))
"""),
        md("""
`bed.ssh_cluster(1)` hands `wb.Cluster` what ipyparallel's SSH launcher needs: one engine on
each host, started over SSH, and a controller here that listens only on the bridge address the
hosts reach. Each engine reports its host's name and the address of its own connection to the
controller; TensorFlow's `TF_CONFIG` uses those addresses. The workbench warns once that TF's
servers are now open to that network.
"""),
        code("""
if bed is not None:
    hosts = wb.Cluster(**bed.ssh_cluster(1)).start()
    table = hosts.engines
""", volatile=True),
        code("""
if bed is not None:
    print("hosts of the engines:", sorted(table.host))
    own = [row.address == bed.hosts[row.host] for row in table.itertuples()]
    print(f"each engine reached on its own host's address: {all(own)} ({sum(own)} of {len(own)} engines)")
"""),
        md("""
The claim of walkthrough 04, now across machines: two MWMS workers on two hosts, with plain
SGD, follow one process on the same global batches, up to float32 summation order.
"""),
        code("""
if bed is not None:
    import numpy as np

    args = dict(model=wb.models.mlp((64, 32)), data=wb.datasets.digits(), global_batch_size=64, steps=40,
                learning_rate=0.1, seed=3, checkpoint_every=0, dashboard=False)
    single = hosts.train(strategy="single", workers=1, **args).wait()
    mwms = hosts.train(strategy="multi_worker_mirrored", workers=2, **args).wait()
    flat = lambda ws: np.concatenate([w.ravel() for w in ws]).astype("float64")
    diff = np.linalg.norm(flat(mwms.weights()) - flat(single.weights())) / np.linalg.norm(flat(single.weights()))
    workers = mwms.placement[mwms.placement.variable.isna()]
    print("MWMS workers on", len(set(workers.host)), "different hosts")
    print(f"MWMS across hosts equals single within 1e-5: {diff < 1e-5} (measured {diff:.1e})")
"""),
        code("""
if bed is not None:
    hosts.stop()   # remote engines stop through their SSH launcher
    bed.close()    # sshd, namespaces, bridge: nothing left behind
"""),
        md("""
## One engine per GPU

On GPU nodes start one engine per GPU. Each engine reports its host and that host's GPUs;
the workbench gives engine number `r` on a host `CUDA_VISIBLE_DEVICES=r` *before*
TensorFlow is imported there, so each process sees exactly one GPU as `GPU:0`. Engines
beyond a host's GPU count see none (CPU only). This is pure logic, so it can be shown for a
cluster we do not have: two hosts with 4 GPUs each, 8 engines started in any order.
"""),
        code("""
import pandas as pd
from workbench.common import roles

engines = [roles.EngineInfo(id=i, host=f"gpu{1 + i % 2}", address=f"10.0.0.{1 + i % 2}", pid=1000 + i,
                            port=20000 + i, gpus=(0, 1, 2, 3)) for i in range(8)]
env = roles.engine_env(engines, cluster_tag="demo")
pd.DataFrame([{"engine": e.id, "host": e.host, "local rank": roles.local_ranks(engines)[e.id],
               "CUDA_VISIBLE_DEVICES": env[e.id]["CUDA_VISIBLE_DEVICES"]} for e in engines]).set_index("engine")
"""),
        md("""
The roles of a run are spread over hosts round-robin, so that tasks of one kind do not
pile onto one machine, and each task's `TF_CONFIG` lists every task's address on its host:
"""),
        code("""
tasks = roles.plan(engines, ("chief", "ps", "worker"), workers=4, ps=2, multi_engine=True)
pd.DataFrame([{"role": t.role, "index": t.index, "host": t.host, "TF server": t.target} for t in tasks])
"""),
        code("""
tasks[0].tf_config["cluster"]
"""),
        md("""
Drawn: each box is an engine, in its host's row at its local rank, which is also the one
GPU it sees; its colour is the task the plan gave it (8 engines, 7 tasks: one engine is
left without a task).
"""),
        code("""
import matplotlib.pyplot as plt

colours = {"chief": "#dd8452", "ps": "#55a868", "worker": "#4c72b0", None: "#dddddd"}
ranks, task_of = roles.local_ranks(engines), {t.engine_id: t for t in tasks}
names = sorted({e.host for e in engines})
fig, ax = plt.subplots(figsize=(8, 2.6))
for e in engines:
    t = task_of.get(e.id)
    x, y = ranks[e.id], names.index(e.host)
    ax.add_patch(plt.Rectangle((x + 0.04, y + 0.08), 0.92, 0.84, color=colours[t.role if t else None]))
    ax.text(x + 0.5, y + 0.5, f"engine {e.id}: {t.name if t else 'no task'}\\n"
            f"CUDA_VISIBLE_DEVICES={env[e.id]['CUDA_VISIBLE_DEVICES']}\\n{t.target if t else ''}",
            ha="center", va="center", fontsize=7.5, color="white" if t else "black")
ax.set(xlim=(0, 4), ylim=(len(names), 0), xticks=[r + 0.5 for r in range(4)],
       xticklabels=[f"local rank {r} (GPU {r})" for r in range(4)], yticks=[i + 0.5 for i in range(len(names))],
       yticklabels=names, title="the plan: one engine per GPU, tasks spread over the hosts")
fig.legend([plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
           ["chief", "PS task", "worker", "engine without a task"], loc="lower center", ncol=4, fontsize=8,
           bbox_to_anchor=(0.5, -0.1))
plt.show()
"""),
        md("""
## Before you run on a real network

TensorFlow's gRPC servers listen on **every** interface with no authentication
(TensorFlow's SECURITY.md: "not built for use in an untrusted network"). ipyparallel binds
loopback by default and signs its messages, but TF's servers are open to anyone who can
reach their ports. On a shared network, keep the cluster on a private network or behind a
firewall that admits only the cluster's hosts; the workbench warns once when a cluster's
addresses are not loopback.
"""),
    ]
