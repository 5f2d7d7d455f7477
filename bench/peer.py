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


def _launch(kind, workload, steps, workers, ps, per_schedule, extra=(), quiet_others=False, **popen):
    """The job's processes, {(role, index): Popen}, and its lead (the chief, or MWMS worker
    0). ``quiet_others``: only the lead's standard output is kept. A launch that fails part
    way ends the processes it started."""
    roles = {"worker": workers} if kind == "mwms" else {"chief": 1, "ps": ps, "worker": workers}
    ports = iter(free_ports(sum(roles.values())))
    cluster = {role: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for role, n in roles.items()}
    lead = ("chief", 0) if kind == "pss" else ("worker", 0)
    procs = {}
    try:
        for role, n in roles.items():
            for i in range(n):
                env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": role, "index": i}}),
                           TF_CPP_MIN_LOG_LEVEL="2", GRPC_FAIL_FAST="use_caller", CUDA_VISIBLE_DEVICES="")
                argv = [sys.executable, str(TASK), kind, workload, str(steps), str(per_schedule), *extra]
                kw = dict(popen, stdout=subprocess.DEVNULL) if quiet_others and (role, i) != lead else popen
                procs[(role, i)] = subprocess.Popen(argv, env=env, text=True, **kw)
    except BaseException:
        for p in procs.values():
            p.kill()
            p.wait()
        raise
    return procs, procs[lead]


def run(kind, workload, steps, workers=2, ps=1, per_schedule=1, timeout=600):
    """Run one peer job; returns {"launched", "first_step", "steps_per_s"} from its chief.
    ``per_schedule``: PSS steps per scheduled function (the tutorial's 1)."""
    launched = time.time()
    procs, lead = _launch(kind, workload, steps, workers, ps, per_schedule, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
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


class Bursts:
    """One peer MWMS job kept running between measurements (``peer_task.py --bursts``):
    ``steps_per_s(n)`` runs ``n`` more steps (``per_call`` per ``tf.function`` call) on
    every worker and returns the lead's steps/s. No process launch between two bursts, so
    a burst can be alternated closely with something else. A context manager: its processes
    end with it (by PID); a burst that takes longer than ``timeout`` raises."""

    def __init__(self, workload, warmup, per_call, workers=2, timeout=300):
        import queue
        import tempfile
        import threading

        self.timeout = timeout
        self.procs, self._reader = {}, None
        self._err = tempfile.TemporaryFile("w+")
        self._lines = queue.Queue()
        try:
            self.procs, self.lead = _launch("mwms", workload, warmup, workers, 0, per_call, extra=("--bursts",),
                                            quiet_others=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=self._err)
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
            self.first = self._line()  # the warm-up run's result
        except BaseException:
            self.close()
            raise

    def _read(self):
        """The lead's JSON lines, as they come (None at its end)."""
        for line in self.lead.stdout:
            if line.startswith("{"):
                self._lines.put(line)
        self._lines.put(None)

    def _failed(self, what):
        self._err.seek(0)
        return RuntimeError(f"peer burst {what}:\n{self._err.read()[-3000:]}")

    def _line(self):
        import queue

        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise self._failed(f"took over {self.timeout} s") from None
        if line is None:
            raise self._failed("failed")
        return json.loads(line)

    def steps_per_s(self, n):
        try:
            for p in self.procs.values():
                p.stdin.write(f"{n}\n")
                p.stdin.flush()
        except OSError:  # a worker died
            raise self._failed("failed") from None
        return self._line()["steps_per_s"]

    def close(self):
        for p in self.procs.values():
            try:
                p.stdin.close()  # the end of its bursts: it exits
            except OSError:
                pass
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._reader is not None:
            self._reader.join(10)  # it ends at the lead's end of output
        for p in self.procs.values():
            if p.stdout and (self._reader is None or not self._reader.is_alive()):
                p.stdout.close()
        self._err.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
