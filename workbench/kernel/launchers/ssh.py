"""Clusters across hosts, seen from the kernel: ipyparallel's SSH launcher set up to start
workbench engines on a dict of hosts, the controller's address as engines dial it, and which
launchers' processes are local (killed by PID) or remote (ended through their launcher)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from workbench.errors import ClusterError, invalid

if TYPE_CHECKING:
    import ipyparallel


def check_hosts(hosts: dict[str, int] | None, engines: int | None, launcher: str | None,
                config: Any = None) -> int | None:
    """``hosts`` ({host: engine count}) for ``launcher``; returns the engine count. An SSH
    launcher needs hosts: ``hosts=``, or the ``config`` (a traitlets ``Config``) naming
    them in ``SSHEngineSetLauncher.engines`` (then ``engines`` is returned as given)."""
    if hosts is None:
        section = (config or {}).get("SSHEngineSetLauncher") or {}  # .get: no section made in the config
        if "engines" not in section:
            raise invalid("hosts", hosts, "a dict of host name -> engine count beside launcher=\"ssh\", e.g. "
                          "{'h1': 2, 'h2': 2} (or config.SSHEngineSetLauncher.engines)")
        return engines
    if launcher != "ssh":
        raise invalid("hosts", hosts, 'hosts only beside launcher="ssh"',
                      f"Received launcher={launcher!r}; other launchers place engines themselves.")
    if not isinstance(hosts, dict) or not hosts or not all(
            isinstance(h, str) and h and isinstance(n, int) and not isinstance(n, bool) and n >= 1
            for h, n in hosts.items()):
        raise invalid("hosts", hosts, "a dict of host name -> engine count (an int >= 1), e.g. {'h1': 2, 'h2': 2}")
    total = sum(hosts.values())
    if engines is not None and engines != total:
        raise invalid("engines", engines, f"the sum of hosts' engine counts ({total}), or no engines= at all")
    return total


def configure_ssh(options: dict[str, Any], hosts: dict[str, int] | None, controller: str, timeout: float,
                  zygote_path: str | None = None) -> bool:
    """Set ipyparallel's SSH engine launcher in ``options`` (``ipyparallel.Cluster``'s
    keywords): engines on ``hosts``, run as workbench engines, and a local controller on
    the address the hosts reach. With ``zygote_path`` (``kernel/zygote.py``'s
    ``remote_path``) the engines fork from a zygote on their host (``start_zygotes``), or
    import TensorFlow themselves while they register where it is not there. Returns whether
    they ask a zygote: not when the config has an engine command of its own."""
    from traitlets.config import Config

    from workbench.kernel.launchers import zygote

    config = options.setdefault("config", Config())
    if hosts is not None:
        config.SSHEngineSetLauncher.engines = dict(hosts)
    python = _config_value(config, "remote_python") or "python3"
    forks = "engine_cmd" not in config.SSHEngineSetLauncher and zygote_path is not None
    if "engine_cmd" not in config.SSHEngineSetLauncher:
        config.SSHEngineSetLauncher.engine_cmd = [
            *(zygote.remote_command(zygote_path, python) if forks else [python, "-m", "workbench.engine.startup.start"]),
            f"--IPEngine.wait_for_url_file={timeout}",
            *(["--IPEngine.enable_nanny=False"] if forks else [])]  # as local zygote engines: we watch PIDs
    options.setdefault("delay", 0)
    from workbench.kernel.launchers.ssh_engines import ParallelSSHEngineSetLauncher

    options["engines"] = ParallelSSHEngineSetLauncher
    if controller == "local" and "controller_ip" not in options and hosts:
        options["controller_ip"] = reachable_address(next(iter(hosts)), _config_value(config, "ssh_args") or [])
    return forks


def start_zygotes(options: dict[str, Any], zygote_path: str) -> list[subprocess.Popen]:
    """A zygote on every host of the SSH launcher that ``configure_ssh`` set in ``options``,
    reached as its engines are (its ssh command, arguments, Python and environment)."""
    from workbench.kernel.launchers import zygote

    config = options["config"]
    hosts = list(config.SSHEngineSetLauncher.engines)
    ssh = [*(_config_value(config, "ssh_cmd") or ["ssh"]), *(_config_value(config, "ssh_args") or [])]
    return zygote.start_remote(hosts, zygote_path, ssh, _config_value(config, "remote_python") or "python3",
                               dict(_config_value(config, "environment") or {}))


def _config_value(config, name):
    for section in ("SSHEngineSetLauncher", "SSHLauncher"):
        if name in config[section]:
            return config[section][name]
    return None


def reachable_address(host: str, ssh_args: Sequence[str] = ()) -> str:
    """This machine's address on the route to ``host`` (as ``ssh_args``' config names it):
    the address a controller here must listen on for engines there to reach it."""
    out = subprocess.run(["ssh", *ssh_args, "-G", host], capture_output=True, text=True, timeout=10)
    name = next((line.split()[1] for line in out.stdout.splitlines() if line.startswith("hostname ")), host)
    try:
        address = socket.getaddrinfo(name, 22, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))  # UDP connect sends nothing
            return s.getsockname()[0]
    except OSError as e:
        raise ClusterError(f"Could not find this machine's address towards host {host!r} ({name}): {e}. "
                           "Pass controller_ip= (an address of this machine that the hosts reach).") from e


def controller_address(connection_info: dict[str, Any]) -> str:
    """The address engines dial the controller on, from the client's connection info: its
    interface, or its location when it listens on every interface."""
    ip = connection_info.get("interface", "tcp://127.0.0.1").split("//")[-1].rsplit(":", 1)[0]
    if ip in ("*", "0.0.0.0", ""):
        ip = connection_info.get("location") or "127.0.0.1"
    return ip


def local_pids(launcher: Any) -> set[int]:
    """PIDs of processes on this machine that ``launcher`` (an ipyparallel launcher or
    engine set) started: none for SSH launchers (their PIDs are the remote host's) or
    batch systems (job ids), none for a launcher that never started (PID -1)."""
    if launcher is None:
        return set()
    from ipyparallel.cluster.launcher import LocalProcessLauncher, SSHLauncher

    children = getattr(launcher, "launchers", None)
    items = list(children.values()) if isinstance(children, dict) else [launcher]
    return {l.pid for l in items if isinstance(l, LocalProcessLauncher) and not isinstance(l, SSHLauncher)
            and isinstance(getattr(l, "pid", None), int) and l.pid > 0}


def ssh_hosts_of(ipp_cluster: ipyparallel.Cluster, pids: Collection[int]) -> dict[int, str]:
    """{remote pid: SSH host (as the launcher's ``engines`` dict names it)} for the engines
    among ``pids`` that an SSH launcher started."""
    from ipyparallel.cluster.launcher import SSHLauncher

    out = {}
    for engine_set in ipp_cluster.engines.values():
        for key, l in getattr(engine_set, "launchers", {}).items():
            if isinstance(l, SSHLauncher) and l.pid in pids:
                out[l.pid] = key.rsplit("/", 1)[0]
    return out


def kill_remote_engines(ipp_cluster: ipyparallel.Cluster, pids: Collection[int] | None = None) -> None:
    """SIGKILL every engine an SSH launcher started, through that launcher's ssh (all at
    once), and detach those launchers from their engine sets: asked to stop, engines that
    hold TF servers take ~10 s each, and ipyparallel's own stop of SSH engines runs a
    remote Python per engine and step, one engine after the other (27 s for 4 here)."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from ipyparallel.cluster.launcher import SSHLauncher

    for engine_set in ipp_cluster.engines.values():  # never started (a failed ssh): nothing to stop
        for key, l in list(getattr(engine_set, "launchers", {}).items()):
            if isinstance(l, SSHLauncher) and l.pid <= 0 and pids is None:
                l.stop_callbacks = []
                engine_set.launchers.pop(key, None)
    launchers = [(engine_set, key, l) for engine_set in ipp_cluster.engines.values()
                 for key, l in list(getattr(engine_set, "launchers", {}).items())
                 if isinstance(l, SSHLauncher) and l.state == "running" and l.pid > 0
                 and (pids is None or l.pid in pids)]

    def kill(item):
        engine_set, key, launcher = item
        command = launcher.ssh_cmd + launcher.ssh_args + [
            launcher.location, f"kill -{signal.SIGKILL.value} {launcher.pid} 2>/dev/null || true"]
        try:
            done = subprocess.run(command, capture_output=True, timeout=30).returncode == 0
        except subprocess.TimeoutExpired:
            done = False
        if done:  # gone: nothing left for ipyparallel's stop to do with this one
            launcher.stop_callbacks = []
            if getattr(launcher, "_stop_waiting", None) is not None:
                launcher._stop_waiting.set()
            engine_set.launchers.pop(key, None)
            if getattr(launcher, "_wait_thread", None) is not None:  # its remote wait returns now
                launcher._wait_thread.join(timeout=20)

    if launchers:
        with ThreadPoolExecutor(min(len(launchers), 8)) as pool:
            list(pool.map(kill, launchers))

