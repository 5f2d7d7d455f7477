"""Launch the peer (bench/peer_task.py) the way TF's tutorials do: one process per task,
a hand-built TF_CONFIG with loopback addresses, started by hand and ended by PID."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

TASK = Path(__file__).resolve().parent / "peer_task.py"


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run(kind, workload, steps, workers=2, ps=1, per_schedule=1, timeout=600):
    """Run one peer job; returns {"launched", "first_step", "steps_per_s"} from its chief.
    ``per_schedule``: PSS steps per scheduled function (the tutorial's 1)."""
    roles = {"worker": workers} if kind == "mwms" else {"chief": 1, "ps": ps, "worker": workers}
    ports = iter(free_ports(sum(roles.values())))
    cluster = {role: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for role, n in roles.items()}
    launched = time.time()
    procs = {}
    for role, n in roles.items():
        for i in range(n):
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": role, "index": i}}),
                       TF_CPP_MIN_LOG_LEVEL="2", GRPC_FAIL_FAST="use_caller", CUDA_VISIBLE_DEVICES="")
            argv = [sys.executable, str(TASK), kind, workload, str(steps), str(per_schedule)]
            procs[(role, i)] = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                text=True)
    lead = procs[("chief", 0)] if kind == "pss" else procs[("worker", 0)]
    try:
        out, err = lead.communicate(timeout=timeout)
        if lead.returncode != 0:
            raise RuntimeError(f"peer {kind} failed:\n{err[-3000:]}")
        if kind == "mwms":
            for p in procs.values():
                p.wait(timeout=60)
    finally:
        for p in procs.values():  # PS and worker servers serve until killed
            if p.poll() is None:
                p.kill()
            p.wait()
    result = json.loads(out.strip().splitlines()[-1])
    result["launched"] = launched
    return result
