"""Emulated hosts on this machine, for trying and testing clusters across hosts.

    with wb.testbed(hosts=2) as bed:             # needs root and Debian's openssh-server
        bed.hosts                                # {"h1": "198.18.7.11", "h2": "198.18.7.12"}
        with wb.Cluster(**bed.ssh_cluster(2)) as cluster:   # 2 engines on each host, over SSH
            cluster.engines                      # host h1/h2 and its address, per engine

A host is a network namespace with a veth into a bridge in the root namespace, an address
in 198.18.0.0/15 (reserved for network benchmarking: never a real network's), a hostname
of its own (a UTS namespace) and an sshd that admits only a key made for the bed. Hosts
share this machine's filesystem and PID space, so the same Python runs everywhere.

Everything is torn down on ``close()`` / leaving the ``with``, on an error while
creating it, and, through a reaper process, when the process that made it dies: daemons
by PID, then anything left in the namespaces, then the namespaces and links.
"""

import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from workbench.errors import TestbedError, invalid
from workbench.kernel.launchers import reaper
from workbench.kernel.testbed import teardown
from workbench.kernel.testbed.commands import ip as _ip, run as _run, tail as _tail

_PACKAGES = {"/usr/sbin/tc": "iproute2", "/usr/sbin/sshd": "openssh-server", "/usr/lib/openssh/sftp-server": "openssh-server",
             "/usr/bin/ssh": "openssh-client", "/usr/bin/ssh-keygen": "openssh-client",
             "/usr/bin/unshare": "util-linux", "/usr/bin/nsenter": "util-linux"}


def testbed(hosts: int | Sequence[str] = 2, *, link: str | dict[str, str | None] | None = None, timeout: float = 30.0,
            slurm: bool = False, private: Sequence[str] = ()) -> "Testbed":
    """Create ``hosts`` emulated hosts (an int, or a list of host names) and return the
    ``Testbed``; use it as a context manager, or call ``close()``. ``slurm=True`` adds a
    Slurm cluster of the hosts (munged, slurmctld, a slurmd each: Debian's slurm-wlm, munge).

    ``private``: absolute paths of directories that each host sees as an empty directory of
    its own (a tmpfs in its own mount namespace), not this machine's: hosts that do not
    share the kernel's files there (e.g. ``private=[os.environ["WORKBENCH_HOME"]]``).

    ``link`` sets every host's link bandwidth ("1gbit", "100mbit", ...), or per host with
    a dict (``{"h1": "100mbit"}``; hosts not named stay unshaped); None leaves links
    unshaped. Only bandwidth is emulated: this kernel has no netem (no latency, no loss)."""
    return Testbed(hosts, link=link, timeout=timeout, slurm=slurm, private=private)


class Testbed:
    """N emulated hosts with an sshd each. See the module's docstring."""

    def __init__(self, hosts: int | Sequence[str] = 2, *, link: str | dict[str, str | None] | None = None,
                 timeout: float = 30.0, slurm: bool = False, private: Sequence[str] = ()) -> None:
        names = [f"h{i + 1}" for i in range(hosts)] if isinstance(hosts, int) and not isinstance(hosts, bool) else hosts
        if not isinstance(names, (list, tuple)) or not 1 <= len(names) <= 200 or len(set(names)) != len(names) \
                or not all(isinstance(n, str) and n.isalnum() and len(n) <= 8 for n in names):
            raise invalid("hosts", hosts, "an int in 1..200, or a list of distinct alphanumeric names of at most 8 characters")
        if isinstance(private, (str, os.PathLike)) or not all(
                isinstance(p, (str, os.PathLike)) and os.path.isabs(p) and os.path.normpath(p) != "/" for p in private):
            raise invalid("private", private, "a list of absolute directory paths other than /, "
                          "e.g. private=['/root/.workbench']")
        self.private = [os.path.normpath(os.fspath(p)) for p in private]
        from workbench.kernel.testbed import links

        rates = links.parse_links(link, names)
        _require_tools()
        self.tag = f"{random.randrange(16 ** 4):04x}"
        net = _free_subnet()
        self.controller_ip = f"198.18.{net}.1"  # the bridge: this machine, as the hosts see it
        self.hosts = {n: f"198.18.{net}.{11 + i}" for i, n in enumerate(names)}
        self.dir = tempfile.mkdtemp(prefix=f"wb-bed-{self.tag}-")
        self.ssh_config = os.path.join(self.dir, "ssh_config")
        self._state = {"bridge": f"wb{self.tag}", "netns": {}, "dir": self.dir,
                       "ssh_config": self.ssh_config, "hosts": list(self.hosts)}
        self._statefile = os.path.join(self.dir, "state.json")
        self._reaper = None
        self._sshd = {}
        self.slurm_conf = None  # the bed's slurm.conf, with slurm=True
        self._slurm_procs = {}  # munged, slurmctld, slurmd-<host>: Popen
        started = time.monotonic()
        try:
            self._save()
            self._reaper = reaper.spawn("workbench.kernel.testbed.teardown", "reap", str(os.getpid()), self._statefile)
            self._make_network()
            self._make_keys()
            self._start_sshds()
            self._wait_ready(timeout)
            self.links = dict.fromkeys(self.hosts)  # host -> bits/s, None: unshaped
            for name, bits in rates.items():
                if bits is not None:
                    self._set_link(name, bits, _record=False)
            links.track(self)
            if slurm:
                self._start_slurm(timeout)
        except BaseException:
            self.close()
            raise
        self.startup_seconds = time.monotonic() - started

    # -- what launchers take ----------------------------------------------------------
    @property
    def ssh_args(self) -> list[str]:
        """Arguments that make ``ssh`` and ``scp`` reach the bed's hosts by name."""
        return ["-F", self.ssh_config]

    def ssh_cluster(self, engines_per_host: int | dict[str, int] = 1, **options: Any) -> dict[str, Any]:
        """Keyword arguments for ``wb.Cluster``: engines on every host, started over SSH,
        the controller listening on the bridge address the hosts reach."""
        from traitlets.config import Config

        per_host = engines_per_host if isinstance(engines_per_host, dict) else dict.fromkeys(self.hosts, engines_per_host)
        config = options.pop("config", None) or Config()
        config.SSHLauncher.ssh_args = self.ssh_args
        config.SSHLauncher.scp_args = self.ssh_args
        config.SSHLauncher.remote_python = sys.executable
        if os.environ.get("PYTHONPATH"):  # the same source tree on every (emulated) host
            config.SSHLauncher.environment = {"PYTHONPATH": os.environ["PYTHONPATH"]}
        return dict(launcher="ssh", hosts=per_host, controller_ip=self.controller_ip, config=config, **options)

    def ssh(self, host: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a shell ``command`` on ``host`` over SSH; returns the CompletedProcess."""
        return subprocess.run(["ssh", *self.ssh_args, host, command], capture_output=True, text=True, timeout=timeout)

    # -- links and faults (workbench.kernel.testbed.links) ---------------------------------------
    @property
    def is_open(self) -> bool:
        return self._state is not None

    def veth(self, host: str) -> str:
        """The host-side end of ``host``'s link, in this (the root) namespace."""
        self._host(host)
        return f"wb{self.tag}{host}"

    def netns(self, host: str) -> str:
        """The network namespace of ``host`` (for ``ip netns exec``)."""
        self._host(host)
        return self._state["netns"][host]

    def set_link(self, host: str, rate: str | None) -> None:
        """Shape ``host``'s link to ``rate`` ("50mbit", "1gbit", ...) both ways, or None to
        remove the shaping; takes effect at once, also while a run trains (and is recorded
        in that run's events)."""
        self._set_link(host, rate)

    def _set_link(self, host, rate, _record=True):
        from workbench.kernel.testbed import links

        self._host(host)
        bits = rate if isinstance(rate, int) and not isinstance(rate, bool) else links.parse_rate(rate, "rate")
        links.shape(self.veth(host), self._state["netns"][host], bits)
        self.links[host] = bits
        if _record:
            links.record_fault(self, "set_link", host, rate=links.format_rate(bits))

    def link_down(self, host: str) -> None:
        """Cut ``host`` off the network (both ends of its link down) until ``link_up``."""
        from workbench.kernel.testbed import links

        self._host(host)
        links.set_state(self.veth(host), self._state["netns"][host], up=False)
        links.record_fault(self, "link_down", host)

    def link_up(self, host: str) -> None:
        from workbench.kernel.testbed import links

        self._host(host)
        links.set_state(self.veth(host), self._state["netns"][host], up=True)
        # a veth that comes back up rejoins the bridge as it was: nothing else to redo
        links.record_fault(self, "link_up", host)

    def kill_engines(self, host: str, sig: int = 9) -> list[int]:
        """Kill every ipyparallel engine running on ``host`` (a lost machine, for its
        engines), and the nanny process ipyparallel starts beside each; returns the
        engines' PIDs (as this machine numbers them, and as the engines report them: for
        engines forked by the host's zygote, their launchers' stand-ins), not their
        nannies'. The host's zygote lives on, and so does Slurm's ``srun`` on the node
        that runs a job's batch script: it is no engine of that host but the launcher of
        every node's tasks, and killing it ended the engines on all hosts."""
        from workbench.kernel.testbed import links

        self._host(host)
        found = {p: teardown.is_engine(p) for p in teardown.netns_pids(self._state["netns"][host])}
        found = {p: kind for p, kind in found.items() if kind}
        for pid in sorted(found):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        pids = sorted(p for p, kind in found.items() if kind == "engine")
        links.record_fault(self, "kill_engines", host, pids=pids)
        return pids

    def _host(self, host):
        if self._state is None:
            raise TestbedError(f"The test bed {self.tag} is closed.")
        if host not in self.hosts:
            raise invalid("host", host, f"a host of this bed ({', '.join(self.hosts)})")

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Stop the hosts' daemons and every process left in them; remove the namespaces,
        links and files. Idempotent."""
        if self._state is None:
            return
        for proc in self._sshd.values():
            proc.poll()
        teardown.teardown(self._state)
        for proc in [*self._sshd.values(), *self._slurm_procs.values()]:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self._state = None
        if self._reaper is not None:  # it exits when the state file is gone
            try:
                self._reaper.wait(5)
            except subprocess.TimeoutExpired:
                self._reaper.kill()
                self._reaper.wait(5)

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<workbench testbed {self.tag}: {', '.join(f'{h}={a}' for h, a in self.hosts.items())}>"

    # -- building -----------------------------------------------------------------------
    def _save(self):
        tmp = self._statefile + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self._state, f)
        os.replace(tmp, self._statefile)

    def _make_network(self):
        bridge = self._state["bridge"]
        _ip("link", "add", bridge, "type", "bridge")
        self._state["bridge_made"] = True
        self._save()
        _ip("addr", "add", f"{self.controller_ip}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for name, address in self.hosts.items():
            self.add_namespace(name, address)

    def add_namespace(self, name: str, address: str) -> str:
        """A network namespace ``wb-<tag>-<name>`` joined to the bed's bridge at ``address``
        (a host, or the bed's Slurm controller): recorded before it exists, so that
        ``close()`` and the reaper remove it whatever happens next. Returns its name."""
        ns, veth = f"wb-{self.tag}-{name}", f"wb{self.tag}{name}"
        _ip("netns", "add", ns)
        self._state["netns"][name] = ns
        self._save()
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", self._state["bridge"], "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", "eth0", "up")
        return ns

    def _make_keys(self):
        for key in ("host_key", "id_ed25519"):
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"workbench-testbed-{self.tag}",
                  "-f", os.path.join(self.dir, key)])
        shutil.copy(os.path.join(self.dir, "id_ed25519.pub"), os.path.join(self.dir, "authorized_keys"))
        lines = []
        for name, address in self.hosts.items():
            lines += [f"Host {name} {address}", f"  HostName {address}"]
        lines += ["Host *", "  User root", f"  IdentityFile {self.dir}/id_ed25519", "  IdentitiesOnly yes",
                  "  BatchMode yes", "  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
                  "  LogLevel ERROR", "  ConnectTimeout 5",
                  # one connection per host, reused by the launchers' many ssh/scp calls
                  "  ControlMaster auto", f"  ControlPath {self.dir}/cm-%h", "  ControlPersist 600"]
        with open(self.ssh_config, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _start_sshds(self):
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
        for path in self.private:  # the mount points, in this machine's view
            os.makedirs(path, exist_ok=True)
        for name, address in self.hosts.items():
            conf = os.path.join(self.dir, f"sshd_{name}.conf")
            with open(conf, "w") as f:
                f.write("\n".join([
                    f"ListenAddress {address}", "Port 22", f"HostKey {self.dir}/host_key",
                    f"PidFile {self.dir}/sshd_{name}.pid", "PermitRootLogin prohibit-password",
                    f"AuthorizedKeysFile {self.dir}/authorized_keys", "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "UseDNS no",
                    "MaxSessions 100", "MaxStartups 100",
                    "Subsystem sftp /usr/lib/openssh/sftp-server",  # scp in OpenSSH 9 needs it
                ]) + "\n")
            ns = self._state["netns"][name]
            # a private directory: an empty tmpfs over it in the host's own mount namespace
            # (unshare --mount: private propagation, so nothing reaches this machine's view);
            # memory is used only as files are written there: 2 GB holds the 3 checkpoints a
            # run keeps of a 200 MB model (256 MB did not hold 2: "No space left on device")
            mounts = "".join(f"mount -t tmpfs -o size=2g,mode=0755 wb-{name} {shlex.quote(p)} && "
                             for p in self.private)
            # ip netns exec, unshare and sh all exec: the Popen's PID is sshd's
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", *(["--mount"] if self.private else []), "sh", "-c",
                 f"hostname {name} && {mounts}exec /usr/sbin/sshd -D -e -f {conf}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(self.dir, f"sshd_{name}.log"), "wb"), start_new_session=True)
            self._sshd[name] = proc
            self._save()

    def _wait_ready(self, timeout):
        end = time.monotonic() + timeout
        waiting = dict(self.hosts)
        while waiting:
            for name in list(waiting):
                if self._sshd[name].poll() is not None:
                    raise TestbedError(f"sshd of host {name} exited with {self._sshd[name].returncode}:\n"
                                       f"{_tail(os.path.join(self.dir, f'sshd_{name}.log'))}")
                out = self.ssh(name, "hostname", timeout=10)
                if out.returncode == 0 and out.stdout.strip() == name:
                    del waiting[name]
            if waiting and time.monotonic() > end:
                raise TestbedError(f"Hosts {sorted(waiting)} did not answer over SSH within {timeout:.0f} s:\n"
                                   + "\n".join(_tail(os.path.join(self.dir, f"sshd_{n}.log")) for n in waiting))
            if waiting:
                time.sleep(0.1)


    # -- MPI and Slurm across the hosts (workbench.kernel.testbed.slurm) ---------------------
    def mpi_cluster(self, engines_per_host: int | dict[str, int] = 1, **options: Any) -> dict[str, Any]:
        """Keyword arguments for ``wb.Cluster``: engines as the ranks of one ``mpiexec`` job
        on every host (its daemons started over the bed's SSH), the controller listening on
        the bridge address the hosts reach."""
        from traitlets.config import Config

        from workbench.kernel.testbed import slurm as slurm_bed

        per_host = engines_per_host if isinstance(engines_per_host, dict) else dict.fromkeys(self.hosts, engines_per_host)
        config = options.pop("config", None) or Config()
        config.MPILauncher.mpi_args = slurm_bed.mpi_args(self, per_host)
        return dict(launcher="mpi", engines=sum(per_host.values()), controller_ip=self.controller_ip, config=config,
                    **options)

    def slurm_cluster(self, engines_per_host: int = 1, **options: Any) -> dict[str, Any]:
        """Keyword arguments for ``wb.Cluster``: engines as the tasks of one ``sbatch`` job,
        ``engines_per_host`` on each of the bed's Slurm nodes (needs ``slurm=True``)."""
        from workbench.kernel.testbed import slurm as slurm_bed

        return slurm_bed.cluster_options(self, engines_per_host, options)

    def squeue(self) -> list[str]:
        """The bed's Slurm jobs, one ``"JOBID STATE NAME"`` line each."""
        from workbench.kernel.testbed import slurm as slurm_bed

        return slurm_bed.squeue(self)

    def _start_slurm(self, timeout):
        from workbench.kernel.testbed import slurm as slurm_bed

        self.slurm_conf = slurm_bed.start(self, timeout, self._slurm_procs)


def _require_tools():
    if os.geteuid() != 0:
        raise TestbedError("The test bed needs root (network namespaces, a bridge, sshd): run as root, "
                           "e.g. in a container or VM made for it.")
    missing = sorted({pkg for path, pkg in _PACKAGES.items() if not os.path.exists(path)}
                     | ({"iproute2"} if shutil.which("ip") is None else set()))
    if missing:
        raise TestbedError(f"The test bed needs Debian's {', '.join(missing)}: "
                           f"apt-get install -y --no-install-recommends {' '.join(missing)}")


def _free_subnet():
    """A /24 of 198.18.0.0/15's first half that no interface here uses yet."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    free = [n for n in range(2, 255) if f" 198.18.{n}." not in used]
    if not free:
        raise TestbedError("Every 198.18.x.0/24 is in use by another test bed on this machine.")
    return random.choice(free)
