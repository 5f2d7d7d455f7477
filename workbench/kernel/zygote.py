"""The kernel's side of zygote start (``workbench.engine.zygote``): when to use it, and its
process's life. Used automatically for local engines on Linux without GPUs;
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

from workbench.common.roles import STARTUP_ENV
from workbench.kernel.processes import reap


@dataclass
class Zygote:
    process: subprocess.Popen
    path: str  # its unix socket; its output goes to ``path + ".log"``

    @property
    def pid(self) -> int:
        return self.process.pid


def wanted() -> bool:
    """Fork engines from a zygote here? Linux, no GPU (CUDA must not cross a fork), not
    turned off by ``WORKBENCH_ZYGOTE=0``."""
    from workbench.engine import inventory

    if os.environ.get("WORKBENCH_ZYGOTE", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds") and not inventory.gpus()


def start() -> Zygote | None:
    """A zygote importing TensorFlow (its engines fork once it has), or None where it is
    not wanted."""
    if not wanted():
        return None
    path = socket_path(os.getpid(), secrets.token_hex(4))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **STARTUP_ENV)  # no thread pool before the fork
    with open(path + ".log", "wb") as log:  # TF's import talks on stderr: not in the kernel's
        process = subprocess.Popen([sys.executable, "-m", "workbench.engine.zygote", path, str(os.getpid())], env=env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
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
    """The launcher's engine command: ask the zygote for an engine (``workbench.engine.forked``)."""
    return [sys.executable, "-m", "workbench.engine.forked", z.path, str(z.pid)]


def stop(z: Zygote) -> None:
    """End the zygote (its engines die with it) and remove its socket."""
    reap({z.pid}, deadline=0)
    try:
        z.process.wait(5)
    except subprocess.TimeoutExpired:
        pass
    for p in (z.path, z.path + ".tmp", z.path + ".log"):
        try:
            os.unlink(p)
        except OSError:
            pass
