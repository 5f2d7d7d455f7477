"""What an engine reports about itself, found without TensorFlow."""

from __future__ import annotations

import atexit
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.common.protocols import Inventory


def report(controller_host: str = "127.0.0.1") -> Inventory:
    """Host, reachable address, pid, a reserved TF port, GPUs and CPUs of this engine.

    The address is the local end of the route to the controller: the interface the
    engine's peers (on the controller's network) can reach it on.
    """
    from workbench.engine.startup import debug

    address = _route_address(controller_host)
    return {
        "host": socket.gethostname(),
        "address": address,
        # an engine forked by a zygote on an SSH host: its launcher's process, which it lives and dies with
        "pid": int(os.environ.get("WORKBENCH_LAUNCHER_PID") or os.getpid()),
        "port": free_port(),
        "gpus": gpus(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "tmp": tempfile.gettempdir(),
        "tf_state": tf_state(),
        "debug": debug.serve(address),  # where the kernel asks for its stacks while it trains
    }


_held: list = []  # the fingerprint of the last task this process ran (``hold``)


def hold(fingerprint: tuple) -> None:
    """This engine now holds the TF state of a task (``roles.fingerprint``): what it
    reports from now on, to whichever kernel asks (``entry.run_task`` calls it)."""
    _held[:] = [fingerprint]


def tf_state() -> tuple | None:
    """The fingerprint of the TF state this engine holds, or None. The kernel that ran a
    task knows it; a kernel attaching later (an attached profile, a shared cluster of a
    test session: ``testing/lender.py``) learns it here, instead of taking such an engine
    for fresh and hanging in a collective of the old one's group."""
    return _held[0] if _held else None


def sees_run(run_dir: str, started: float) -> bool:
    """Does this engine see the kernel's run directory: its ``run.json``, as the kernel
    wrote it at ``started``? An engine on a host without the kernel's filesystem does not."""
    from workbench.store import RunDir

    try:
        record = RunDir(run_dir).read_run()
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("started") == started


def _route_address(controller_host):
    """This engine's end of its own connection to the controller (what its peers on the
    controller's network reach), else the local end of the route to the controller."""
    if controller_host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    own = _connection_address(controller_host)
    if own:
        return own
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((controller_host, 9))  # UDP connect sends nothing
            return s.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def _connection_address(controller_host):
    try:
        import psutil

        controller = socket.gethostbyname(controller_host)  # an address stays itself
        connections = psutil.Process().net_connections(kind="tcp")
    except Exception:  # noqa: BLE001 - psutil missing or denied: the route will do
        return None
    mine = sorted({c.laddr.ip for c in connections if c.raddr and c.raddr.ip == controller and c.laddr})
    return mine[0] if len(mine) == 1 else None


def free_port() -> int:
    """A port free on every interface (TF's gRPC server binds them all), below the
    system's ephemeral range. A port from that range, once free, may become the local end
    of any outgoing connection, which blocks a server from listening on it until that
    connection and its TIME_WAIT end: a replacement engine that must take over a dead
    engine's port then failed with "Could not start gRPC server" (seen in CI)."""
    low = _ephemeral_low()
    for _ in range(100):
        port = random.randrange(max(1024, low - 16384), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # all tried were taken
        s.bind(("", 0))
        return s.getsockname()[1]


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; macOS and Windows start theirs higher


def gpus() -> list[int]:
    """This host's GPU indices (nvidia-smi, else /proc/driver/nvidia), [] without GPUs."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=index", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout
            return [int(line) for line in out.split() if line.strip().isdigit()]
        except (subprocess.SubprocessError, OSError):
            pass
    try:
        return list(range(len(os.listdir("/proc/driver/nvidia/gpus"))))
    except OSError:
        return []


ENGINE_PID_FILE = ".engine-pid"  # in its TMPDIR: whose it is (kernel/processes.sweep_engine_tmpdirs)


def configure(env: dict[str, str]) -> int:
    """Set the engine's lifetime environment. All of it but ``TMPDIR`` (read when a
    temporary file is made) must be set before TensorFlow is imported. Returns the engine's pid."""
    if "tensorflow" in sys.modules:
        changed = {k: v for k, v in env.items() if k != "TMPDIR" and os.environ.get(k) != v}
        if changed:
            raise RuntimeError(
                f"TensorFlow was imported on this engine before the workbench set {sorted(changed)}"
            )
    os.environ.update(env)
    os.makedirs(env["TMPDIR"], exist_ok=True)
    with open(os.path.join(env["TMPDIR"], ENGINE_PID_FILE), "w") as f:  # for the sweep of a killed engine's
        f.write(str(os.getpid()))
    tempfile.tempdir = None  # re-read TMPDIR
    if not _own_tmpdir:  # the engine removes it when it exits, whoever stops it (an attached cluster's ipcluster too)
        atexit.register(remove_tmpdir)
    _own_tmpdir[:] = [env["TMPDIR"]]
    return os.getpid()


_own_tmpdir: list[str] = []


def remove_tmpdir() -> None:
    """Remove the private TMPDIR ``configure`` made (at exit: atexit, or a forked engine's
    ``engine/startup/zygote.py`` before ``os._exit``). A killed engine leaves it to ``Cluster.stop``
    or the kernel's reaper."""
    for path in _own_tmpdir:
        shutil.rmtree(path, ignore_errors=True)
