"""A synchronous worker that stalls for longer than TF's default heartbeat timeout (10 s)
does not abort its peers' collectives: busy machines (CI's 2 cores) stall a process that
long. Two plain TF processes build the engines' MultiWorkerMirroredStrategy on loopback,
all-reduce, one is stopped (SIGSTOP) 13 s, and both all-reduce again. Under TF's default
the second all-reduce failed: "stopped sending heartbeats" (measured with this script)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from workbench.engine.startup.inventory import free_port
from workbench.engine.strategies import multi_worker_mirrored

pytestmark = pytest.mark.slow

STALL = 13.0  # s: over TF's default heartbeat timeout (10 s), under the engines' own

WORKER = """
import sys
import tensorflow as tf
from workbench.engine.strategies.multi_worker_mirrored import collective_strategy
from tensorflow.python.eager import context

strategy = collective_strategy("stall")
total = tf.function(lambda: strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None))
print("heartbeat_ms", context.context().coordination_service.heartbeat_timeout_in_ms, flush=True)
print("first", float(total()), flush=True)
sys.stdin.readline()
print("second", float(total()), flush=True)
"""


def _line(process, prefix):
    """The worker's next line, which must start with ``prefix``."""
    line = process.stdout.readline()
    assert line.startswith(prefix), (line, process.poll())
    return line.split()[1]


def test_a_worker_stalled_past_tfs_default_heartbeat_timeout_does_not_abort_the_collectives():
    assert multi_worker_mirrored.HEARTBEAT_TIMEOUT > STALL + 10  # room for a slow restart
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(2)]}
    workers = []
    try:
        for index in range(2):
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
                       TF_CPP_MIN_LOG_LEVEL="3")
            workers.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env, text=True, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        for w in workers:
            assert int(_line(w, "heartbeat_ms")) == multi_worker_mirrored.HEARTBEAT_TIMEOUT * 1000
            assert float(_line(w, "first")) == 2.0
        os.kill(workers[1].pid, signal.SIGSTOP)
        time.sleep(STALL)  # the fault itself: a process that does not run for STALL seconds
        os.kill(workers[1].pid, signal.SIGCONT)
        for w in workers:
            w.stdin.write("\n")
            w.stdin.flush()
        for w in workers:
            assert float(_line(w, "second")) == 2.0
            assert w.wait(timeout=60) == 0
    finally:
        for w in workers:
            if w.poll() is None:
                os.kill(w.pid, signal.SIGCONT)
                w.kill()
                w.wait()
