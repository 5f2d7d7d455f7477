"""ipyparallel's MPI and Slurm launchers running workbench engines, on this machine and
across emulated hosts (``wb.testbed(slurm=True)``: a real slurmctld and a slurmd per host):
both strategies train, an MPI job is restarted whole when engines must be recycled, a
parameter-server run on Slurm survives the loss of a host's engines (replaced on that
node), and ``stop()`` ends the mpiexec job / cancels the Slurm jobs with nothing left
behind. And the bed's cluster with ipyparallel's CurveZMQ encryption on."""

import json
import os
import subprocess
import time

import pytest

import workbench as wb
from checks import a_lost_host_of_workers_is_replaced_there, wait_for
from workbench.kernel.engines.processes import alive

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DIGITS = wb.datasets.digits()
MLP = wb.models.mlp((64, 32))
ARGS = dict(global_batch_size=64, steps=50, checkpoint_every=0)


def mpiexec_pids(cluster):
    return {s.pid for s in cluster.launched.ipp.engines.values()}


def train_both(cluster, hosts):
    """MWMS over 2 workers, then PSS (chief, 1 PS, 2 workers or 1): every step once, the
    tasks on the hosts asked for, MWMS's workers on two of them where there are two."""
    mwms = cluster.train(MLP, DIGITS, strategy="multi_worker_mirrored", workers=2, **ARGS).wait(timeout=120)
    assert mwms.history.groupby("worker").step.max().tolist() == [50, 50]
    tasks = mwms.placement[mwms.placement.variable.isna()]
    assert set(tasks.host) <= set(hosts) and len(set(tasks.host)) == min(2, len(set(hosts)))
    workers = 2 if len(cluster.engine_info) >= 4 else 1
    pss = cluster.train(MLP, DIGITS, strategy="parameter_server", workers=workers, ps=1, steps_per_execution=5,
                        **ARGS).wait(timeout=120)
    assert sorted(pss.history.step) == list(range(1, 51))
    assert set(pss.placement[pss.placement.variable.isna()].host) == set(hosts)
    for task in pss.tasks:  # TF_CONFIG from the addresses and ports the engines reported
        e = cluster.engine_info[task.engine_id]
        assert task.target is None or task.target == f"{e.address}:{e.port}"
    return mwms, pss


def test_mpi_on_this_machine_trains_both_strategies_and_restarts_the_job_whole():
    started = time.monotonic()
    cluster = wb.Cluster(engines=3, launcher="mpi", timeout=90).start()
    try:
        up = time.monotonic() - started
        first_job = mpiexec_pids(cluster)
        before = {e: (i.host, i.port) for e, i in cluster.engine_info.items()}
        mwms, _ = train_both(cluster, [before[0][0]] * 3)
        # PSS needed other TF state on every engine: the mpiexec job was restarted whole, its
        # new ranks on the same host and TF ports
        assert mpiexec_pids(cluster).isdisjoint(first_job) and not any(alive(p) for p in first_job)
        assert {e: (i.host, i.port) for e, i in cluster.engine_info.items()} == before
        pids = {i.pid for i in cluster.engine_info.values()} | mpiexec_pids(cluster)
    finally:
        t = time.monotonic()
        cluster.stop()
        down = time.monotonic() - t
    print(f"MPI, 3 local engines: start {up:.1f} s, stop {down:.1f} s")
    assert not [p for p in pids if alive(p)], "mpiexec or engines left after stop()"


def test_mpi_refuses_to_restart_its_job_under_a_running_run():
    from workbench.kernel.launchers import batch as launchers

    class Busy:
        id, done = "run-x", False

    with pytest.raises(wb.ClusterError, match="ranks of one mpiexec job.*run run-x is still using them"):
        launchers.refuse_under_run([Busy()], [1])


@pytest.fixture(scope="module")
def bed():
    with wb.testbed(hosts=3, slurm=True) as b:  # 3: a parameter-server run has a host of workers only
        yield b


def in_bed(bed):
    """PIDs of processes in the bed's host namespaces that are not its daemons."""
    daemons = {p.pid for p in [*bed._sshd.values(), *bed._slurm_procs.values()]}
    out = set()
    for host in bed.hosts:
        pids = subprocess.run(["ip", "netns", "pids", bed._state["netns"][host]], capture_output=True, text=True)
        out |= {int(p) for p in pids.stdout.split()}
    # the daemons' own: Slurm's step daemons finishing, sshd's sessions of the bed's SSH masters
    return {p for p in out - daemons if alive(p) and not _cmdline(p).startswith(("slurmstepd", "sshd:"))}


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.hosts
def test_mpi_across_two_hosts_trains_both_strategies_and_stop_ends_the_job(bed):
    started = time.monotonic()
    cluster = wb.Cluster(**bed.mpi_cluster({"h1": 2, "h2": 2}), timeout=90)
    with pytest.warns(UserWarning, match="TensorFlow's gRPC servers"):
        cluster.start()
    try:
        up = time.monotonic() - started
        table = cluster.engines
        assert sorted(table.host) == ["h1", "h1", "h2", "h2"]
        assert all(row.address == bed.hosts[row.host] for row in table.itertuples())
        assert set(table.cpus) == {2}  # ranks unbound: TF sees every core
        train_both(cluster, ["h1", "h2"])
        assert sorted(cluster.engines.host) == ["h1", "h1", "h2", "h2"]  # the restarted job: same hosts
        assert in_bed(bed)
    finally:
        t = time.monotonic()
        cluster.stop()
        down = time.monotonic() - t
    print(f"MPI, 2 hosts x 2 engines: start {up:.1f} s, stop {down:.1f} s")
    assert not in_bed(bed), "processes left on the hosts after stop(): " + str({p: _cmdline(p) for p in in_bed(bed)})


@pytest.mark.hosts
def test_slurm_across_three_hosts_trains_both_strategies_survives_a_lost_host_and_stop_cancels_the_jobs(bed):
    """The engines are the tasks of one job on the 3 nodes. The engines of the job's first
    node are killed between runs (Slurm's ``srun``, which holds every node's tasks, lives on
    there): the other nodes' engines run on, and the next run replaces the lost ones on
    their node. Then every engine of the host that holds only a parameter-server run's
    workers is killed mid-run: the lost worker is replaced on its node and the run
    completes, as on the SSH bed (``tests/test_host_faults.py``). ``stop()`` then cancels
    every job, the replacements' too."""
    started = time.monotonic()
    cluster = wb.Cluster(**bed.slurm_cluster(2), timeout=90)
    with pytest.warns(UserWarning, match="TensorFlow's gRPC servers"):
        cluster.start()
    try:
        up = time.monotonic() - started
        assert len(bed.squeue()) == 1 and " RUNNING " in bed.squeue()[0]
        table = cluster.engines
        assert sorted(table.host) == ["h1", "h1", "h2", "h2", "h3", "h3"]
        assert all(row.address == bed.hosts[row.host] for row in table.itertuples())
        assert not cluster.launched.pids - {cluster.launched.ipp.controller.pid}  # node PIDs are never killed from here
        batch = next(iter(cluster.launched.ipp.engines.values())).batch_file  # in the profile, not the working directory
        assert batch.startswith(cluster.launched.ipp.profile_dir) and os.path.exists(batch)
        train_both(cluster, ["h1", "h2", "h3"])
        # the node that runs the first job's batch script, and its srun for every node's tasks
        job = next(iter(cluster.launched.ipp.engines.values())).job_id
        first = subprocess.run(["squeue", "-h", "-j", job, "-o", "%B"], capture_output=True, text=True, check=True,
                               env=dict(os.environ, SLURM_CONF=bed.slurm_conf)).stdout.strip()
        engines = {e: info for e, info in cluster.engine_info.items()}
        gone = {e for e, info in engines.items() if info.host == first}
        assert sorted(bed.kill_engines(first)) == sorted(engines[e].pid for e in gone), "its engines, not srun"
        wait_for(lambda: not gone & set(cluster.client.ids), 30, lambda: f"{gone} unregistered: {cluster.client.ids}")
        assert set(engines) - gone <= set(cluster.client.ids), "the other nodes' engines live on"
        run = cluster.train(MLP, DIGITS, strategy="parameter_server", workers=2, ps=1, global_batch_size=64,
                            steps=1_000_000, checkpoint_every=0)  # stopped once replaced
        wait_for(lambda: run.step >= 100 or run.done, 120, lambda: f"step 100; at {run.step}")
        assert sorted(cluster.engines.host) == sorted(table.host), "each replacement on its predecessor's node"
        engines = {info.pid: info.host for info in cluster.engine_info.values()}
        host, killed = a_lost_host_of_workers_is_replaced_there(cluster, bed, run)
        assert sorted(killed) == sorted(p for p, h in engines.items() if h == host), "the host's engines, no more"
        assert sorted(cluster.engines.host) == sorted(table.host)
        print(f"Slurm: {host}'s engines {killed} killed; replaced there, the run stopped at step {run.final_step}; "
              f"jobs {bed.squeue()}")
    finally:
        t = time.monotonic()
        cluster.stop()
        down = time.monotonic() - t
    print(f"Slurm, 3 hosts x 2 engines: start {up:.1f} s, stop {down:.1f} s")
    assert bed.squeue() == [] and not os.path.exists(batch)
    assert not in_bed(bed), "processes left on the hosts after stop(): " + str({p: _cmdline(p) for p in in_bed(bed)})


@pytest.mark.hosts
def test_curve_encrypted_cluster_across_hosts_trains(bed, monkeypatch):
    """ipyparallel's CurveZMQ (IPP_ENABLE_CURVE=1): the controller's connection files carry
    its public key, engines on both hosts register through encrypted sockets, MWMS trains."""
    monkeypatch.setenv("IPP_ENABLE_CURVE", "1")
    with pytest.warns(UserWarning, match="TensorFlow's gRPC servers"):
        cluster = wb.Cluster(**bed.slurm_cluster(1), timeout=90).start()
    try:
        info = cluster.client._config
        assert info.get("curve_serverkey"), f"no CurveZMQ key in the client's connection info: {sorted(info)}"
        security = cluster.launched.ipp.profile_dir + "/security"
        engine_file = json.load(open(os.path.join(security, f"ipcontroller-{cluster.launched.ipp.cluster_id}-engine.json")))
        assert engine_file["curve_serverkey"] == info["curve_serverkey"]
        assert sorted(cluster.engines.host) == ["h1", "h2", "h3"]
        run = cluster.train(MLP, DIGITS, strategy="multi_worker_mirrored", workers=2, **ARGS).wait(timeout=120)
        assert run.history.groupby("worker").step.max().tolist() == [50, 50]
    finally:
        cluster.stop()
    assert bed.squeue() == []
