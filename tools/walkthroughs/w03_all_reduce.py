"""03: synchronous all-reduce with MultiWorkerMirroredStrategy; bytes per step."""

from make_notebooks import code, md

NAME = "03_all_reduce"


def cells():
    return [
        md("""
# All-reduce: synchronous data parallelism without a server

ChainerMN, Horovod, NCCL and TensorFlow's `MultiWorkerMirroredStrategy` (MWMS) all do the
same four things each step, on every worker: forward pass, backward pass, **all-reduce**
the gradients (every worker ends with their sum), apply the same update. No server holds
the variables; every worker holds a copy, and the copies never drift apart.

This notebook computes the bytes one step must move, measures what a run actually sent,
and shows why a *ring* all-reduce uses every link's full bandwidth.
"""),
        code("""
import re
import subprocess

import pandas as pd
import workbench as wb

cluster = wb.Cluster(engines=2).start()
data = wb.datasets.synthetic(examples=4096, features=784)  # MNIST-sized inputs, generated locally
model = wb.models.mlp((512,))                                # the wide MLP: 784-512-10
params = 784 * 512 + 512 + 512 * 10 + 10
size = params * 4                                            # float32 gradients
print(f"{params} parameters: every step all-reduces {size} bytes ({size / 1e6:.2f} MB) of gradients")
"""),
        md("""
## What one step should send

A ring all-reduce over `n` workers cuts the gradient into `n` chunks and passes them round
the ring twice: once adding (reduce-scatter), once copying the sums (all-gather). Each
worker sends `2 (n-1)/n` times the gradient's size, so with 2 workers each sends exactly
one gradient's worth and the pair sends two:
"""),
        code("""
n = 2
expected = n * 2 * (n - 1) / n * size
print(f"expected bytes per step, both workers together: {expected:.0f}")
"""),
        md("""
## What a run actually sent

Both workers run on this machine and talk over TCP on the loopback interface: each worker's
TensorFlow server listens on the port the engines table shows, and the other worker's
requests and the gradients' chunks travel on connections to those ports. Linux counts the
bytes every connection has sent (`ss -ti` shows them as `bytes_sent`); summing them over the
connections to and from the workers' ports counts the run's own traffic only, not the
notebook's, the browser's or any other program's on this machine. Two runs of different
lengths cancel the fixed costs (start, checkpoint, metrics): the difference divided by the
extra steps is the traffic of one training step.
"""),
        code("""
def sent_per_connection(ports):  # {(from, to): bytes sent so far}, connections to or from these ports
    where = " or ".join(f"sport = :{p} or dport = :{p}" for p in ports)
    out = subprocess.run(["ss", "-tinH", f"( {where} )"], capture_output=True, text=True, check=True).stdout
    sent, connection = {}, None
    for line in out.splitlines():
        if not line[:1].isspace():        # a connection: state, queues, its two addresses
            connection = tuple(line.split()[3:5])
        elif match := re.search(r"\\bbytes_sent:(\\d+)", line):  # its TCP counters, on the next line
            sent[connection] = int(match.group(1))
    return sent

def train(steps):
    return cluster.train(model=model, data=data, strategy="multi_worker_mirrored", workers=2, global_batch_size=256,
                         steps=steps, checkpoint_every=0, dashboard=False).wait()

def bytes_sent_by(steps):
    before = sent_per_connection(ports)
    train(steps)
    after = sent_per_connection(ports)  # a connection opened during the run counts from 0
    return sum(sent - before.get(connection, 0) for connection, sent in after.items())

warm = train(10)  # warm-up: the engines import TensorFlow and connect
ports = [int(task.target.rsplit(":", 1)[1]) for task in warm.tasks]  # the workers' TF servers
short, long = bytes_sent_by(100), bytes_sent_by(300)
measured = (long - short) / 200
print(f"measured bytes per step: {measured:.0f}, {measured / expected:.3f} x the ring's figure")
""", volatile=True),
        code("""
print(f"bytes per step within 10% of 2 (n-1)/n x gradient bytes per worker: {0.9 < measured / expected < 1.1} "
      f"(measured {measured / expected:.3f} x)")
"""),
        md("""
What is left over is gRPC's framing and the workers' control messages: a fraction of a
percent (TCP's own headers are not in `bytes_sent`).

## Why the ring uses all the bandwidth

Compare the busiest link's load per step (bytes in plus out), for `n` workers and a
gradient of `S` bytes:

- **ring all-reduce**: every worker sends and receives `2 (n-1)/n x S`, under `2 S`
  however many workers there are; every link carries the same load, all at once;
- **one parameter server**: the PS link receives `n x S` gradients and sends `n x S`
  variables; it grows with the workers while the workers' own links idle.
"""),
        code("""
rows = []
for workers in (2, 4, 8, 16, 64):
    ring = 2 * 2 * (workers - 1) / workers * size  # sent + received by each worker
    ps = 2 * workers * size                          # received + sent by the PS task
    rows.append({"workers": workers, "ring, predicted: bytes in+out, any link": round(ring),
                 "one PS, predicted: bytes in+out, PS link": ps, "PS / ring": round(ps / ring, 1)})
pd.DataFrame(rows).set_index("workers")
"""),
        md("""
The same formulas as lines, in units of the gradient's size S, beside the one point this
notebook measured: 2 workers, whose links each carried what both sent per step above (a
worker sends half of it and receives the other half). Walkthrough 09 measures the ring at
3 and 4 workers and a parameter server's link at 1-3 workers, on emulated hosts.
"""),
        code("""
import matplotlib.pyplot as plt
import numpy as np

ns = np.arange(2, 17)
fig, ax = plt.subplots(figsize=(7, 3.4))
ax.plot(ns, 2 * 2 * (ns - 1) / ns, color="#2471a3", label="ring, predicted: 4 (n-1)/n x S on every link")
ax.plot(ns, 2 * ns, color="#888", label="one PS, predicted: 2 n x S on the PS link")
ax.plot([n], [measured / size], "o", color="#c30", label="ring, measured here: a worker's bytes in+out / S")
ax.set(xlabel="workers n", ylabel="bytes in+out per step / S", ylim=(0, None), title="the busiest link's load per step")
ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))  # under the chart
fig.tight_layout()
plt.show()
"""),
        md("""
So the ring's time per step stays nearly flat as workers are added (`2 S / bandwidth`,
plus latency per hop), and a faster link (NCCL over NVLink, RDMA) speeds every step up
directly: the faster all-reduce is, the further training scales out. The cost is the
synchronous part: every step waits for the slowest worker (see `05_sync_vs_async`).
"""),
        code("""
cluster.stop()
"""),
    ]
