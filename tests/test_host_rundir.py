"""Hosts without the kernel's filesystem: engines whose host has its own, empty workbench
home (a tmpfs in the host's mount namespace) do not see the run directory. The kernel
finds that at launch, warns naming the hosts, and carries the run through ipyparallel:
``run.stop()`` reaches the tasks, the chief's checkpoints and the metrics files come back
into the kernel's run directory at the end, and ``resume()`` hands the checkpoint back.
While the run trains, the kernel keeps its copy current (``kernel/unshared.py``): the
tasks' metrics (what the panel and other processes read), each checkpoint of the chief as
it is saved, and a STOP file from the CLI or the panel forwarded to the hosts."""

import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import ipyparallel as ipp
import pytest

import workbench as wb
from checks import bed_cluster, wait_for
from workbench.engine import rundir
from workbench.kernel.runs import files
from workbench.store import Home, RunDir, Records, history

pytestmark = [pytest.mark.hosts, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def bed():
    with wb.testbed(hosts=2, private=[str(Home().path)]) as b:
        yield b


@pytest.fixture(scope="module")
def cluster(bed):
    c = bed_cluster(bed, {"h1": 2, "h2": 1})  # its warning on TF's servers is tested in test_hosts.py
    yield c
    c.stop()


def test_hosts_with_a_private_directory_do_not_see_this_machines_files_there(bed):
    home = Home().path
    marker = home / f"seen-by-kernel-{os.getpid()}"
    marker.write_text("kernel")
    try:
        for host in bed.hosts:
            out = bed.ssh(host, f"ls -A {home}; test -e {marker} && echo SEEN; touch {home}/made-on-{host}")
            assert out.returncode == 0, out.stderr
            assert "SEEN" not in out.stdout and out.stdout.strip() == ""  # its own, empty directory
        assert not list(home.glob("made-on-*")), "a host's files must not appear in this machine's view"
    finally:
        marker.unlink()


def test_stop_checkpoints_and_resume_work_on_hosts_without_the_run_directory(cluster):
    with pytest.warns(UserWarning, match=r"Engines on h1, h2 do not see this kernel's run directory") as seen:
        run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="multi_worker_mirrored",
                            workers=2, global_batch_size=32, steps=100_000, checkpoint_every=50, seed=0)
    message = str(seen[0].message)
    for what in (str(run.run_dir), "run.stop()", "resume", "STOP file", "WORKBENCH_HOME"):
        assert what in message
    ev = run.events
    assert list(ev[ev.kind == "run_dir_unshared"].hosts) == [["h1", "h2"]]
    wait_for(lambda: run.step >= 120 or run.done, 180, lambda: (run.step, run.status))
    assert not run.done, run.error
    run.stop()  # the STOP file is on this machine only: the request goes through ipyparallel
    assert run.done and run.stopped and run.error is None and run.final_step < 100_000
    stopped_at = run.final_step
    # the chief's checkpoint (saved at the agreed stop step) and every task's metrics came back
    store = RunDir(run.run_dir)
    assert store.checkpoint_step() == stopped_at
    for w in ("worker:0", "worker:1"):
        assert store.metrics_file(w).exists()
    loaded = wb.load(run.id)
    assert loaded.final_step == stopped_at and len(loaded.history) == len(run.history)
    # resume: the checkpoint goes back to the hosts, and the run continues from it exactly
    target = stopped_at + 30
    resumed = resume_exactly(run, stopped_at, target, timeout=300)
    assert RunDir(resumed.run_dir).checkpoint_step() == target  # the resumed run's last one came back too


def test_a_parameter_server_run_whose_chief_does_not_see_the_run_directory_checkpoints_stops_and_resumes(cluster):
    """Parameter-server training on such hosts: the chief (the coordinator, which saves the
    checkpoints) sends each one here as it saves it; run.stop() reaches it through
    ipyparallel; the final checkpoint is here and a resume continues from it exactly."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*do not see this kernel's run directory")
        run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="parameter_server", workers=1,
                            ps=1, global_batch_size=32, steps=100_000, checkpoint_every=50, seed=0)
    chief = next(t for t in run.tasks if t.role == "chief")
    ev = run.events
    assert chief.host in ev[ev.kind == "run_dir_unshared"].hosts.iloc[0]
    store = RunDir(run.run_dir)
    wait_for(lambda: (store.checkpoint_step() or 0) >= 100 or run.done, 180,
             lambda: (store.checkpoint_step(), run.step, run.status))
    assert not run.done, run.error
    run.stop()
    assert run.done and run.stopped and run.error is None and run.final_step < 100_000
    assert store.checkpoint_step() == run.final_step
    saved, target = run.final_step, run.final_step + 30
    resumed = run.resume(steps=target).wait(timeout=300)
    assert resumed.final_step == target and sorted(resumed.history.step) == list(range(saved + 1, target + 1))
    assert RunDir(resumed.run_dir).checkpoint_step() == target


def train(cluster, steps, every):
    with warnings.catch_warnings():  # the warning about these hosts: tested above
        warnings.filterwarnings("ignore", message=".*do not see this kernel's run directory")
        return cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="multi_worker_mirrored",
                             workers=2, global_batch_size=32, steps=steps, checkpoint_every=every, seed=0)


def test_the_cli_stops_a_run_on_hosts_without_the_run_directory_whose_files_arrive_while_it_trains(cluster):
    run = train(cluster, 100_000, 50)
    store = RunDir(run.run_dir)
    # while it trains: each checkpoint, TensorBoard's logs and both tasks' metrics are here
    wait_for(lambda: (store.checkpoint_step() or 0) >= 100 or run.done, 120,
             lambda: (store.checkpoint_step(), run.step, run.status))
    assert not run.done, run.error
    assert list(store.tensorboard_dir.glob("events.out.tfevents.*")), "TensorBoard logs not sent"
    assert len(list(store.checkpoints_dir.glob("ckpt-*.index"))) <= 3, "the manager keeps 3; so does the copy"
    rows = store.read_metrics({})["rows"]
    assert {r["worker"] for r in rows} == {"worker:0", "worker:1"}
    assert {"checkpoint", "placement"} <= {e["kind"] for e in store.read_metrics({})["events"]}
    seen = next(r for r in Records().state()["runs"] if r["run_id"] == run.id)  # what the panel shows
    assert seen["status"] == "running" and seen["step"] >= 100 and seen["tensorboard"], seen
    # the CLI, another process: its STOP file is on this machine only; the kernel forwards it
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "workbench", "stop", run.id], capture_output=True, text=True,
                         timeout=120)
    took = time.monotonic() - t0
    print(f"python -m workbench stop: the run ended {took:.1f} s after the command started")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "status         stopped" in out.stdout, out.stdout
    assert run.join(10) and run.stopped and run.error is None and run.final_step < 100_000
    assert took < 30
    assert store.checkpoint_step() == run.final_step  # its final checkpoint, here
    assert f"checkpoint     step {run.final_step}" in out.stdout
    # the copy here is whole: asked again, the hosts send nothing
    assert files.pull_run_files(cluster.client, run.tasks, str(run.run_dir), "worker:0", timeout=60) == 0
    again = subprocess.run([sys.executable, "-m", "workbench", "stop", run.id], capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 2 and f"Expected a running run. Run {run.id} is stopped." in again.stderr


ATTACHED_KERNEL = """
import time
import workbench as wb

cluster = wb.Cluster(profile={profile!r}).start()
run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="multi_worker_mirrored", workers=2,
                    global_batch_size=32, steps=10**7, checkpoint_every=50, dashboard=False)
print(run.run_dir, flush=True)
while True:
    time.sleep(1)
"""


def test_a_run_another_kernel_picks_up_keeps_its_copy_current_and_forwards_the_clis_stop(bed):
    """An attached cluster (engines outlive kernels) on hosts without the run directory: the
    run's own kernel dies, another attaches and wb.load()s it live. That kernel now copies
    the tasks' metrics and the chief's checkpoints here, and forwards the CLI's STOP file."""
    import ipyparallel as ipp
    from IPython.paths import get_ipython_dir

    from checks import stop_process_tree
    from workbench.kernel.launchers import ssh

    profile = f"wb-unshared-{os.getpid()}"
    options = bed.ssh_cluster(1)
    options.pop("launcher")
    ssh.configure_ssh(options, options.pop("hosts"), "local", 120)
    owner = ipp.Cluster(n=2, profile_dir=os.path.join(get_ipython_dir(), f"profile_{profile}"), log_level=40,
                        **options)
    owner.start_cluster_sync()
    try:
        client = owner.connect_client_sync()
        client.wait_for_engines(2, timeout=120, interactive=False)
        client.close()
        kernel = subprocess.Popen([sys.executable, "-c", ATTACHED_KERNEL.format(profile=profile)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            run_dir = kernel.stdout.readline().strip()
            assert run_dir, kernel.stderr.read()[-3000:]
            store = RunDir(run_dir)
            wait_for(lambda: copied_step(store) > 100, 180, lambda: "steps copied by the run's own kernel")
        finally:
            stop_process_tree(kernel, "the run's own kernel", ask=signal.SIGKILL)
        run_id = os.path.basename(run_dir)
        with wb.Cluster(profile=profile) as attached:
            run = wb.load(run_id)
            assert not run.done and run.unshared_hosts == ["h1", "h2"], run
            # this kernel owns it now (the panel and the CLI see it running), and gets the tasks' publishes
            assert next(r for r in Records().state()["runs"] if r["run_id"] == run_id)["status"] == "running"
            copied = copied_step(store)
            wait_for(lambda: copied_step(store) > copied + 100 and (store.checkpoint_step() or 0) > copied, 120,
                     lambda: f"this kernel's copy going past step {copied}: {copied_step(store)}, "
                             f"checkpoint {store.checkpoint_step()}")
            assert not run.done, run.failure
            out = subprocess.run([sys.executable, "-m", "workbench", "stop", run_id], capture_output=True, text=True,
                                 timeout=120)
            assert out.returncode == 0, (out.stderr[-3000:], run.failure)
            assert run.join(30) and run.stopped and run.error is None, run
            assert store.checkpoint_step() == run.final_step
            assert attached.attached
    finally:
        owner.stop_cluster_sync()
        # its MWMS engines were slow to exit and were killed: their TMPDIRs stay for a sweep
        from workbench.kernel.engines.processes import sweep_engine_tmpdirs

        from workbench.common.roles import engine_tmpdir

        theirs = engine_tmpdir(tempfile.gettempdir(), profile, "*")
        wait_for(lambda: not sweep_engine_tmpdirs() and not glob.glob(theirs), 60,
                 lambda: f"the TMPDIRs of {profile}'s engines swept: {glob.glob(theirs)}")


@ipp.interactive
def saying_loss(y, p):
    """The default loss, after a line on descriptor 2 from TensorFlow's C++ (``tf.print``) at every step."""
    import sys

    import keras
    import tensorflow as tf

    tf.print("the loss of a batch of", tf.shape(y)[0], output_stream=sys.stderr)
    return keras.losses.sparse_categorical_crossentropy(y, p)


def test_every_tasks_output_reaches_the_kernel_and_its_files_from_hosts_without_the_run_directory(cluster, bed):
    """Issue 41.1 on hosts that do not see the run directory: each task's lines come to the
    kernel live and are appended to the kernel's copy of its log file while it trains; at
    the end that copy is the host's file, whole, and wb.load reads the lines back."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*do not see this kernel's run directory")
        run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), loss=saying_loss,
                            strategy="multi_worker_mirrored", workers=2, global_batch_size=32, steps=100_000,
                            checkpoint_every=0, seed=0, dashboard=False)
    store = RunDir(run.run_dir)
    workers = ("worker:0", "worker:1")

    def copied():  # the lines of both tasks, in this machine's copy of their files
        on_disk = store.read_logs({})
        return all(sum(text == "the loss of a batch of 16" for _, _, text in on_disk.get(w, [])) > 20
                   for w in workers)

    wait_for(lambda: copied() or run.done, 120, lambda: (run.step, run.status, store.read_logs({}).keys()))
    assert not run.done, run.error
    live = run.logs()
    assert {w: (live[live.task == w].line == "the loss of a batch of 16").sum() > 20 for w in workers} == \
        {w: True for w in workers}
    run.stop()
    assert run.stopped, run.error
    for task in run.tasks:
        on_host = bed.ssh(task.host, f"cat {store.log_file(task.name)}")
        assert on_host.returncode == 0, on_host.stderr
        assert store.log_file(task.name).read_text() == on_host.stdout  # the host's, whole
    loaded = wb.load(run.id).logs()
    for w in workers:
        said = loaded[(loaded.task == w) & (loaded.line == "the loss of a batch of 16")]
        assert len(said) >= run.final_step and (said.stream == "err").all()


def copied_step(store):
    """The last step any task's metrics file here holds (0 before the first)."""
    return max((r["step"] for r in store.read_metrics({})["rows"]), default=0)


def test_a_lost_chief_host_loses_only_the_steps_since_its_last_checkpoint(cluster, bed):
    run = train(cluster, 100_000, 50)
    store = RunDir(run.run_dir)
    chief = next(t for t in run.tasks if t.name == "worker:0")
    wait_for(lambda: (store.checkpoint_step() or 0) >= 100 or run.done, 120,
             lambda: (store.checkpoint_step(), run.step, run.status))
    bed.kill_engines(chief.host)
    with pytest.raises(wb.EngineError, match=r"^worker:0 \(engine "):
        run.wait(timeout=60)
    wiped = bed.ssh(chief.host, f"rm -rf {run.run_dir} && test ! -e {run.run_dir}")  # its disk is gone too
    assert wiped.returncode == 0, wiped.stderr
    saved = store.checkpoint_step()  # the copy here: the last checkpoint the chief announced
    assert saved == max(run.checkpoint_steps()) and saved >= 100
    target = saved + 40
    resume_exactly(run, saved, target, timeout=120)
    # the lost task's metrics before the checkpoint were kept here: the run's whole history
    whole = history(run.run_dir)
    for w in ("worker:0", "worker:1"):
        assert list(whole[whole.worker == w].step) == list(range(1, target + 1))


def test_run_files_move_whole_and_stay_inside_the_run_directory(tmp_path):
    src, dst = tmp_path / "host", tmp_path / "kernel"
    (src / "checkpoints").mkdir(parents=True)
    (src / "checkpoints" / "ckpt-5.index").write_bytes(b"\x00index")
    (src / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-5"\n')
    (src / "metrics").mkdir()
    (src / "metrics" / "worker:0.jsonl").write_text('{"step": 1}\n')
    files = rundir.read_files(str(src), ["checkpoints", "metrics/worker:0.jsonl", "metrics/worker:1.jsonl"])
    assert sorted(files) == ["checkpoints/checkpoint", "checkpoints/ckpt-5.index", "metrics/worker:0.jsonl"]
    assert rundir.write_files(str(dst), files) == 3
    assert RunDir(dst).checkpoint_step() == 5
    assert RunDir(src).checkpoint_parts(5) == ["checkpoints/ckpt-5.index", "tensorboard", "checkpoints/checkpoint"]
    assert (dst / "checkpoints" / "ckpt-5.index").read_bytes() == b"\x00index"
    # a copy that holds them already is sent only what changed (the end of a run re-sends no checkpoint)
    parts = ["checkpoints", "metrics/worker:0.jsonl"]
    assert rundir.read_files(str(src), parts, rundir.digests(str(dst), parts)) == {}
    (src / "metrics" / "worker:0.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert list(rundir.read_files(str(src), parts, rundir.digests(str(dst), parts))) == ["metrics/worker:0.jsonl"]
    with pytest.raises(ValueError, match=r"argument 'files'. Received: a path '../escape'"):
        rundir.write_files(str(dst), {"../escape": b"x"})
    assert not (tmp_path / "escape").exists()


def test_engines_mpi_or_slurm_started_are_asked_whether_they_see_the_run_directory(tmp_path):
    """``EnginePool.hosts_without`` asks every engine that no local launcher of this kernel
    started (``ssh.local_pids``): SSH engines (tested above on the bed), and also
    mpiexec's ranks (only mpiexec itself is a local process) and a Slurm job's engines (no
    local process at all). The launchers as ipyparallel builds them; no MPI or Slurm run."""
    from ipyparallel.cluster.launcher import (LocalEngineLauncher, LocalEngineSetLauncher, MPIEngineSetLauncher,
                                              SlurmEngineSetLauncher)

    from workbench.kernel.launchers import ssh

    where = dict(work_dir=str(tmp_path), profile_dir=str(tmp_path / "profile"), cluster_id="t")
    mpi = MPIEngineSetLauncher(**where)
    mpi.pid = 4242  # mpiexec's, as the launcher records it once started
    assert ssh.local_pids(mpi) == {4242}, "only mpiexec: its ranks are asked"
    assert ssh.local_pids(SlurmEngineSetLauncher(**where)) == set(), "a Slurm job's engines are all asked"
    assert ssh.local_pids(MPIEngineSetLauncher(**where)) == set()  # never started: pid -1
    local = LocalEngineSetLauncher(**where)  # against which: local engines are this machine's, never asked
    local.launchers["0"] = child = LocalEngineLauncher(**where)
    child.pid = 4343
    assert ssh.local_pids(local) == {4343}


def test_the_kernels_copy_takes_what_tasks_on_other_hosts_published(tmp_path):
    """``kernel/unshared.py`` on its own, with what ipyparallel hands it (a task's
    ``AsyncResult.data``): metrics appended, sent files written and then let go, the STOP
    file forwarded once, a failing disk said once."""
    from workbench.engine.metrics import FILES
    from workbench.kernel.runs.files import Mirror

    mirror = Mirror(tmp_path / "run", ["worker:0"])
    data = {"rows": [], FILES: {"step": 10, "files": {"checkpoints/ckpt-10.index": b"i",
                                                      "checkpoints/checkpoint": b'model_checkpoint_path: "ckpt-10"\n'}}}
    assert mirror.take("worker:0", data, [{"step": 10, "worker": "worker:0"}], []) is None
    store = RunDir(tmp_path / "run")
    assert store.checkpoint_step() == 10 and FILES not in data
    assert [r["step"] for r in store.read_metrics({})["rows"]] == [10]
    assert mirror.take("worker:1", {"rows": []}, [{"step": 1, "worker": "worker:1"}], []) is None  # a shared host's
    assert not store.metrics_file("worker:1").exists()
    assert mirror.stop_to_forward() is False
    store.request_stop()
    assert mirror.stop_to_forward() is True and mirror.stop_to_forward() is False
    store.metrics_dir.rename(tmp_path / "moved")
    store.metrics_dir.write_text("a file where the metrics folder was")
    error = mirror.take("worker:0", {}, [{"step": 11, "worker": "worker:0"}], [])
    assert error is not None and error.startswith("FileExistsError") and "metrics" in error
    assert mirror.take("worker:0", {}, [{"step": 12, "worker": "worker:0"}], []) is None


def resume_exactly(run, saved, target, timeout):
    """``run`` resumed from its checkpoint of step ``saved`` to ``target``: each worker makes
    exactly the steps after it, once."""
    resumed = run.resume(steps=target).wait(timeout=timeout)
    assert resumed.final_step == target
    h = resumed.history
    for w in ("worker:0", "worker:1"):
        assert list(h[h.worker == w].step) == list(range(saved + 1, target + 1))
    return resumed
