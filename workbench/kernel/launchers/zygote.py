"""The kernel's side of zygote start (``workbench.engine.startup.zygote``): when to use it, and its
process's life. Used automatically for local engines on Linux without GPUs, and on each
host of an SSH cluster (kept by an ``ssh`` process here; it refuses on hosts with GPUs);
``WORKBENCH_ZYGOTE=0`` turns it off (each engine then imports TensorFlow itself, as on GPU
hosts). Measured here (bench/scale.py, ``--zygote both``): see bench/README.md."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from workbench.common.roles import startup_env
from workbench.kernel.engines.processes import reap


@dataclass
class Zygote:
    process: subprocess.Popen
    path: str  # its unix socket; its output goes to ``path + ".log"``

    @property
    def pid(self) -> int:
        return self.process.pid


def enabled() -> bool:
    """Not turned off by ``WORKBENCH_ZYGOTE=0``."""
    return os.environ.get("WORKBENCH_ZYGOTE", "1").strip().lower() not in ("0", "false", "no", "off")


def wanted() -> bool:
    """Fork engines from a zygote here? Linux, no GPU (CUDA must not cross a fork), not
    turned off by ``WORKBENCH_ZYGOTE=0``."""
    from workbench.engine.startup import inventory

    if not enabled():
        return False
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds") and not inventory.gpus()


def start() -> Zygote | None:
    """A zygote importing TensorFlow (its engines fork once it has), or None where it is
    not wanted."""
    if not wanted():
        return None
    path = socket_path(os.getpid(), secrets.token_hex(4))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **startup_env())  # no thread pool before the fork
    # TF's import talks on stderr: not in the kernel's. A session of its own, as ipyparallel
    # starts the controller and engine launchers: the engines it forks share its process
    # group, and a Ctrl-C in the kernel's terminal (which signals the terminal's whole
    # foreground group) must reach the kernel only, which stops the run cleanly
    with open(path + ".log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "workbench.engine.startup.zygote", path, str(os.getpid())], env=env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    return Zygote(process, path)


def socket_path(owner: int, token: str) -> str:
    """Where the zygote of kernel ``owner`` listens (``token="*"``: a glob of all of its)."""
    return os.path.join(tempfile.gettempdir(), f"wbz-{owner}-{token}.sock")


def remove_leftovers(owner: int) -> None:
    """The sockets and logs of kernel ``owner``'s zygotes, for its reaper when it died."""
    import glob

    for path in glob.glob(socket_path(owner, "*") + "*"):
        try:
            os.unlink(path)
        except OSError:
            pass


def command(z: Zygote) -> list[str]:
    """The launcher's engine command: ask the zygote for an engine (``workbench.engine.startup.forked``)."""
    return [sys.executable, "-m", "workbench.engine.startup.forked", z.path, str(z.pid)]


def stop(z: Zygote) -> None:
    """End the zygote (its engines die with it) and remove its socket."""
    reap({z.pid}, deadline=0)
    try:
        z.process.wait(5)
    except subprocess.TimeoutExpired:
        pass
    for p in (z.path, z.path + ".tmp", z.path + ".log", z.path + ".pid"):
        try:
            os.unlink(p)
        except OSError:
            pass


# -- zygotes on SSH hosts --------------------------------------------------------------

def remote_path(token: str) -> str:
    """The socket path of an SSH cluster's zygotes, ``{host}`` standing for each host's name."""
    return f"/tmp/wbz-ssh-{token}-{{host}}.sock"


def start_remote(hosts: list[str], path: str, ssh: list[str], python: str, env: dict[str, str]) -> list[subprocess.Popen]:
    """A zygote on each of ``hosts``, each kept by an ``ssh`` process here (``ssh``: the
    command and its arguments up to the host): it serves while that process lives.
    Their output goes to this machine's temporary directory (``remove_leftovers``); a
    zygote refuses on hosts with GPUs, and engines there import TensorFlow themselves."""
    variables = [f"{k}={v}" for k, v in {**env, "OPENBLAS_NUM_THREADS": "1", **startup_env()}.items()]
    out = []
    for host in hosts:
        log = socket_path(os.getpid(), f"{secrets.token_hex(4)}-{host}") + ".log"
        with open(log, "wb") as f:
            process = subprocess.Popen([*ssh, host, "env", *variables, python, "-m", "workbench.engine.startup.zygote", path, "0"],
                                       stdin=subprocess.PIPE, stdout=f, stderr=subprocess.STDOUT,  # its end, its zygote's
                                       start_new_session=True)  # out of reach of a Ctrl-C in the kernel's terminal (start)
        process.log = log
        out.append(process)
    return out


def end_remote(processes: list[subprocess.Popen]) -> None:
    """After their ssh processes were killed (their zygotes end with the sessions): reap
    them and remove their logs."""
    for process in processes:
        process.stdin.close()
        process.wait()
        try:
            os.unlink(process.log)
        except OSError:
            pass


def remote_command(path: str, python: str) -> list[str]:
    """The SSH launcher's engine command: ask this host's zygote for an engine."""
    return [python, "-m", "workbench.engine.startup.forked", path, "-"]
