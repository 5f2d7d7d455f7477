"""Taking a test bed down, whatever state it was left in: from its state record, by the bed
itself (``Testbed.close``) or by a reaper process when the process that made the bed died
(``python -m workbench.kernel.testbed.teardown reap OWNER STATEFILE``); and which processes
in a host's namespace are engines (``Testbed.kill_engines``)."""

import json
import os
import shutil
import subprocess
import sys
from typing import Any

from workbench.kernel.launchers import reaper


def teardown(state: dict[str, Any]) -> None:
    """Undo a bed from its state record: SSH masters, daemons by PID, every process left in
    its namespaces, the namespaces (with their veths), the bridge, the files."""
    from workbench.kernel.engines.processes import alive, reap

    for name in state.get("hosts", []):
        subprocess.run(["ssh", "-F", state["ssh_config"], "-O", "exit", name], capture_output=True, timeout=10)
    # the daemons and whatever they started live in the namespaces: nothing else is touched
    pids = set().union(*[netns_pids(ns) for ns in state.get("netns", {}).values()])
    for _ in range(3):  # processes may still be forking in the namespaces
        for pid in pids:
            if alive(pid):
                try:
                    os.kill(pid, 15)
                except ProcessLookupError:
                    pass
        reap(pids, deadline=3)
        pids = set().union(*[netns_pids(ns) for ns in state.get("netns", {}).values()])
        if not pids:
            break
    for ns in state.get("netns", {}).values():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for host in state.get("netns", {}):  # a namespace something still holds keeps its veth: remove it here
        veth = f"{state['bridge']}{host}"
        if os.path.exists(f"/sys/class/net/{veth}"):
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
    if state.get("bridge_made"):
        subprocess.run(["ip", "link", "del", state["bridge"]], capture_output=True)
    shutil.rmtree(state["dir"], ignore_errors=True)  # the state file too: the reaper then exits


def netns_pids(ns: str) -> set[int]:
    """The PIDs of every process in network namespace ``ns``."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()} if out.returncode == 0 else set()


def is_engine(pid: int) -> str | None:
    """What process ``pid`` is, from its command line: "engine" (an engine, or the
    launcher's stand-in for an engine forked by the host's zygote: the PID the engine
    reports), "forked" (such an engine: a child of the zygote, with its command line),
    "nanny" (the process ipyparallel starts beside each remote engine:
    ``python -m ipyparallel.engine.nanny``) or None (``srun``, whose command line holds the
    engine's, included)."""
    cmd = cmdline(pid)
    if os.path.basename(cmd.split(b" ", 1)[0]) == b"srun":  # its arguments name the engine it starts
        return None
    if b"ipyparallel.engine.nanny" in cmd:
        return "nanny"
    if b"workbench.engine.startup.zygote" in cmd:
        import psutil

        try:
            parent = psutil.Process(pid).ppid()
        except psutil.Error:
            return None
        return "forked" if b"workbench.engine.startup.zygote" in cmdline(parent) else None
    engine = (b"ipyparallel.engine", b"ipengine", b"workbench.engine.startup.start", b"workbench.engine.startup.forked")
    return "engine" if any(name in cmd for name in engine) else None


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ")
    except OSError:
        return b""


def _reap(owner, statefile):
    """``python -m workbench.kernel.testbed.teardown reap OWNER STATEFILE``: when OWNER dies with
    its bed still up, tear the bed down (a ``workbench.kernel.launchers.reaper``). Exits when the
    state file disappears."""
    return reaper.watch(owner, statefile, _teardown_recorded)


def _teardown_recorded(statefile):
    try:
        with open(statefile) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return
    teardown(state)



if __name__ == "__main__":
    if sys.argv[1:2] == ["reap"]:
        sys.exit(_reap(int(sys.argv[2]), sys.argv[3]))
    sys.exit("usage: python -m workbench.kernel.testbed.teardown reap OWNER_PID STATEFILE")
