"""The test bed's MPI and Slurm: what ``mpiexec`` needs to reach the bed's hosts, and a
Slurm cluster of the bed's own (``wb.testbed(hosts=2, slurm=True)``).

Slurm here is a real one: munged and slurmctld in a namespace of their own on the bed's
bridge (``slurmctld``, address .2), one slurmd per host in that host's network and UTS
namespaces (``nsenter --net``: ``ip netns exec`` remounts /sys and slurmd then finds no
cgroup filesystem). Everything is the bed's: its own munge key and socket, its own
``slurm.conf`` (clients find it through ``SLURM_CONF``, set only in the commands the
launcher runs), its state and logs under the bed's folder. The daemons live in the bed's
namespaces, so the bed's teardown ends them, and the jobs' processes, with the rest.
"""

import os
import shutil
import subprocess
import time
from typing import Any

from workbench.errors import TestbedError
from workbench.kernel.testbed.commands import tail

PACKAGES = {"/usr/sbin/slurmctld": "slurm-wlm", "/usr/sbin/slurmd": "slurm-wlm", "/usr/bin/sbatch": "slurm-wlm",
            "/usr/sbin/munged": "munge"}
CTL = "slurmctld"  # the controller's namespace (longer than any host name: no clash)
# ``bed`` below is a ``testbed.Testbed``, typed ``Any``: testbed imports this module


def mpi_args(bed: Any, per_host: dict[str, int]) -> list[str]:
    """``mpiexec`` arguments that place ``per_host`` ({host: ranks}) ranks on the bed's
    hosts, its daemons started over the bed's SSH, its traffic on the bed's network."""
    from workbench.kernel.launchers.batch import local_mpi_args

    subnet = bed.controller_ip.rsplit(".", 1)[0] + ".0/24"
    env = ["-x", "IPP_CONNECTION_INFO"] + (["-x", "PYTHONPATH"] if os.environ.get("PYTHONPATH") else [])
    return [*local_mpi_args(), "--host", ",".join(f"{bed.hosts[h]}:{n}" for h, n in per_host.items()),
            "--mca", "plm_rsh_agent", f"ssh -F {bed.ssh_config}",
            "--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet, *env]


def require_packages() -> None:
    missing = sorted({pkg for path, pkg in PACKAGES.items() if not os.path.exists(path)})
    if missing:
        raise TestbedError(f"The test bed's Slurm needs Debian's {', '.join(missing)}: "
                           f"apt-get install -y --no-install-recommends {' '.join(missing)}")


def start(bed: Any, timeout: float, procs: dict[str, subprocess.Popen]) -> str:
    """Start munged, slurmctld and a slurmd per host into ``procs`` (the bed's daemons by
    name, which it ends on close); wait until every node is idle. Returns the path of the
    bed's ``slurm.conf``."""
    require_packages()
    net = bed.controller_ip.rsplit(".", 1)[0]
    ctl_ip = f"{net}.2"
    ns = bed.add_namespace(CTL, ctl_ip)

    base = os.path.join(bed.dir, "slurm")
    munge = os.path.join(bed.dir, "munge")
    os.makedirs(os.path.join(base, "state"))
    os.makedirs(munge)
    os.chmod(bed.dir, 0o711)  # munged (user munge) reaches its own folder, and no more
    key = os.path.join(munge, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    shutil.chown(munge, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    os.chmod(munge, 0o755)
    socket_path = os.path.join(munge, "munge.socket")
    conf = os.path.join(base, "slurm.conf")
    nodes = [f"NodeName={h} NodeAddr={a} NodeHostname={h} CPUs=2 State=UNKNOWN" for h, a in bed.hosts.items()]
    with open(conf, "w") as f:
        f.write("\n".join([
            f"ClusterName=wb{bed.tag}", f"SlurmctldHost={CTL}({ctl_ip})", "SlurmUser=root", "SlurmdUser=root",
            "SlurmctldPort=6817", "SlurmdPort=6818", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}", f"StateSaveLocation={base}/state",
            f"SlurmdSpoolDir={base}/spool-%n", f"SlurmctldPidFile={base}/slurmctld.pid",
            f"SlurmdPidFile={base}/slurmd-%n.pid", f"SlurmctldLogFile={base}/slurmctld.log",
            f"SlurmdLogFile={base}/slurmd-%n.log", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2", "KillWait=2", "InactiveLimit=0", "MinJobAge=2", "SlurmdTimeout=30",
            *nodes, "PartitionName=bed Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4",
        ]) + "\n")
    netns = f"/run/netns/{ns}"
    procs["munged"] = _daemon(bed, "munged", ["nsenter", f"--net={netns}", "runuser", "-u", "munge", "--",
                                              "/usr/sbin/munged", "-F", f"--socket={socket_path}", f"--key-file={key}",
                                              f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                                              f"--seed-file={munge}/munged.seed"])
    _wait(lambda: os.path.exists(socket_path), timeout, "munged's socket", bed, procs, "munged")
    procs["slurmctld"] = _daemon(bed, "slurmctld", [
        "nsenter", f"--net={netns}", "unshare", "--uts", "sh", "-c", f"hostname {CTL} && exec /usr/sbin/slurmctld -D -i -f {conf}"])
    for host in bed.hosts:
        hns = f"/run/netns/{bed.netns(host)}"
        procs[f"slurmd-{host}"] = _daemon(bed, f"slurmd-{host}", [
            "nsenter", f"--net={hns}", "unshare", "--uts", "sh", "-c",
            f"hostname {host} && exec /usr/sbin/slurmd -D -N {host} -f {conf}"])

    def idle():
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                             env=dict(os.environ, SLURM_CONF=conf), timeout=10)
        states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
        return sorted(states) == sorted(bed.hosts) and all(s == "idle" for s in states.values())

    _wait(idle, timeout, "every Slurm node idle", bed, procs, *procs)
    return conf


def _daemon(bed, name, cmd):
    log = open(os.path.join(bed.dir, f"{name}.out"), "wb")
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        log.close()


def _wait(cond, timeout, what, bed, procs, *names):
    end = time.monotonic() + timeout
    while not cond():
        dead = [n for n in names if procs[n].poll() is not None]
        if dead or time.monotonic() > end:
            logs = "\n".join(f"--- {n} ---\n{_logs(bed, n)}" for n in (dead or names))
            raise TestbedError(f"The test bed's Slurm did not come up ({what}"
                               + (f"; {', '.join(dead)} exited" if dead else f", {timeout:.0f} s") + f"):\n{logs}")
        time.sleep(0.1)


def _logs(bed, name):
    base = os.path.join(bed.dir, "slurm")
    extra = {"munged": os.path.join(bed.dir, "munge", "munged.log"), "slurmctld": os.path.join(base, "slurmctld.log")}
    path = extra.get(name) or os.path.join(base, f"{name}.log")
    return "\n".join(filter(None, [tail(os.path.join(bed.dir, f"{name}.out")), tail(path)]))


def cluster_options(bed: Any, engines_per_host: int, options: dict[str, Any]) -> dict[str, Any]:
    """``wb.Cluster`` keywords: engines as the tasks of one sbatch job on the bed's nodes
    (``engines_per_host`` tasks a node), the controller here on the bridge address."""
    from traitlets.config import Config

    if bed.slurm_conf is None:
        raise TestbedError("This test bed has no Slurm: make it with wb.testbed(hosts=..., slurm=True).")
    config = options.pop("config", None) or Config()
    env = ["env", f"SLURM_CONF={bed.slurm_conf}"]
    section = config.SlurmEngineSetLauncher
    section.submit_command = [*env, "sbatch"]
    section.delete_command = [*env, "scancel"]
    section.signal_command = [*env, "scancel", "-s"]
    # --ntasks-per-node spreads the engines over the hosts (Slurm would pack a host's CPUs);
    # a replacement (n=1) lands on any node
    section.batch_template = "\n".join([
        "#!/bin/sh", "#SBATCH --export=ALL", "#SBATCH --job-name=ipengine-{cluster_id}",
        "#SBATCH --ntasks={n}", f"#SBATCH --ntasks-per-node={engines_per_host}",
        "#SBATCH --output={output_file}", "srun {program_and_args}", ""])
    return dict(launcher="slurm", engines=engines_per_host * len(bed.hosts), controller_ip=bed.controller_ip,
                config=config, **options)


def squeue(bed: Any) -> list[str]:
    """The bed's Slurm jobs: one ``"JOBID STATE NAME"`` line each."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], capture_output=True, text=True,
                         env=dict(os.environ, SLURM_CONF=bed.slurm_conf), timeout=10)
    if out.returncode != 0:
        raise TestbedError(f"squeue failed: {out.stderr.strip()}")
    return [line for line in out.stdout.splitlines() if line.strip()]

