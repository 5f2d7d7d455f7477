"""The launcher's command for a local engine when a zygote runs (``workbench.engine.startup.zygote``):

    python -m workbench.engine.startup.forked SOCKET ZYGOTE_PID [ipengine arguments ...]
    python -m workbench.engine.startup.forked SOCKET_WITH_{host} - [ipengine arguments ...]  # SSH hosts

It asks the zygote to fork an engine with these arguments, this process's environment,
working directory and standard streams, then stands in for it: signals it receives go to
the engine, and it exits when the engine does, so that ipyparallel's launcher sees the
engine's life as that of its process. It imports nothing heavy. If the zygote is not
there (it refused to fork, or died), it becomes an engine the usual way
(``workbench.engine.startup.start``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from workbench.common.pids import alive  # os and /proc only: nothing heavy
from workbench.common.sockets import read_line


def _connect(path: str, zygote: int, timeout: float) -> socket.socket | None:
    """A connection to the zygote once its socket appears; None if it died or refused."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and alive(zygote):
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                return s
            except OSError:
                s.close()
        time.sleep(0.02)
    return None


def _fallback(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "workbench.engine.startup.start", *argv])


def _pid_in(path: str, timeout: float) -> int | None:
    """The PID a zygote wrote to ``path``, once it has; None if it never did, or wrote
    "refused" (it forks nothing on this host)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(path) as f:  # written whole: the zygote renames it into place
                content = f.read()
        except OSError:
            time.sleep(0.05)
            continue
        return int(content) if content.isdigit() else None
    return None


def main() -> None:
    path, zygote, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    if zygote == "-":  # a zygote started on this host over SSH: the host's name in its path, its PID in a file
        path = path.replace("{host}", socket.gethostname())
        zygote = _pid_in(path + ".pid", timeout=30)
        if zygote is None:
            _fallback(argv)
        # the engine reports this process's PID, the one its launcher knows and stops it by
        os.environ["WORKBENCH_LAUNCHER_PID"] = str(os.getpid())
    conn = _connect(path, int(zygote), timeout=120)
    if conn is None:
        _fallback(argv)
    request = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode() + b"\n"
    socket.send_fds(conn, [request], [0, 1, 2])
    reply = read_line(conn)
    answer = json.loads(reply) if reply.endswith(b"\n") else {}
    if "pid" not in answer:
        conn.close()
        _fallback(argv)
    pid = answer["pid"]

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    while True:  # the engine holds the other end: EOF when it exits
        try:
            if not conn.recv(4096):
                break
        except InterruptedError:
            continue
    sys.exit(0)


if __name__ == "__main__":
    main()
