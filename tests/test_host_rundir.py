"""Hosts without the kernel's filesystem: engines whose host has its own, empty workbench
home (a tmpfs in the host's mount namespace) do not see the run directory. The kernel
finds that at launch, warns naming the hosts, and carries the run through ipyparallel:
``run.stop()`` reaches the tasks, the chief's checkpoints and the metrics files come back
into the kernel's run directory at the end, and ``resume()`` hands the checkpoint back."""

import os

import pytest

import workbench as wb
from checks import bed_cluster, wait_for
from workbench.engine import rundir
from workbench.store import Home, RunDir

pytestmark = [pytest.mark.hosts, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def bed():
    with wb.testbed(hosts=2, private=[str(Home().path)]) as b:
        yield b


@pytest.fixture(scope="module")
def cluster(bed):
    c = bed_cluster(bed, 1)  # its warning on TF's servers is tested in test_hosts.py
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
    resumed = run.resume(steps=target).wait(timeout=300)
    assert resumed.final_step == target
    h = resumed.history
    for w in ("worker:0", "worker:1"):
        assert list(h[h.worker == w].step) == list(range(stopped_at + 1, target + 1))
    assert RunDir(resumed.run_dir).checkpoint_step() == target  # the resumed run's last one came back too


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
    assert (dst / "checkpoints" / "ckpt-5.index").read_bytes() == b"\x00index"
    with pytest.raises(ValueError, match=r"argument 'files'. Received: a path '../escape'"):
        rundir.write_files(str(dst), {"../escape": b"x"})
    assert not (tmp_path / "escape").exists()
