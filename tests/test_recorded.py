"""A run outlives the kernel that started it: listed, loaded, shown and resumed to its
exact step count from another kernel and from the CLI."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import workbench as wb
from workbench import store
from workbench.kernel.engines.processes import alive
from checks import relative_difference, wait_for

EVERY = 100
ARGS = dict(global_batch_size=64, learning_rate=0.1, seed=1)

# the "kernel": trains MWMS far beyond STEPS, checkpointing every EVERY steps, until killed
KERNEL = textwrap.dedent(f"""
    import time
    import workbench as wb

    cluster = wb.Cluster(engines=2).start()
    run = cluster.train(wb.models.mlp((64, 32)), wb.datasets.digits(), strategy="multi_worker_mirrored",
                        workers=2, steps=10**6, checkpoint_every={EVERY}, dashboard=False, **{ARGS!r})
    print(run.run_dir, flush=True)
    while True:
        time.sleep(1)
""")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.cluster
@pytest.mark.slow
def test_a_run_whose_kernel_was_killed_is_loaded_and_resumed_to_its_exact_step_count():
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        run_dir = kernel.stdout.readline().strip()
        assert run_dir, kernel.stderr.read()[-3000:]
        newest = lambda: wb.history(run_dir).step.max() if list(os.scandir(run_dir + "/metrics")) else 0  # noqa: E731
        wait_for(lambda: (store.RunDir(run_dir).checkpoint_step() or 0) >= 2 * EVERY and newest() > 2 * EVERY + 20, 180,
                 lambda: f"a checkpoint at {2 * EVERY} and steps past it: {store.RunDir(run_dir).checkpoint_step()}, "
                         f"step {newest()}")
    finally:
        kernel.send_signal(signal.SIGKILL)  # the kernel process this test started
        kernel.wait(30)
    engines = [t["pid"] for t in json.loads(open(run_dir + "/run.json").read())["tasks"]]
    wait_for(lambda: not [p for p in engines if alive(p)], 30, lambda: f"engines still up: {engines}")
    run_id = os.path.basename(run_dir)

    lost = wb.load(run_id[:-2])  # a unique prefix is enough
    saved = lost.checkpoint  # the engines trained on until the reaper ended them, seconds later
    assert lost.id == run_id and lost.status == "lost" and saved >= 2 * EVERY
    STEPS = saved + 150  # noqa: N806 (the run's target, as the test's other constants)
    h = lost.history
    assert set(h.worker) == {"worker:0", "worker:1"} and h.step.max() >= saved
    assert len(lost.placement) and "checkpoint" in set(lost.events.kind)
    assert run_id in lost.dashboard()._repr_html_() and "lost" in repr(lost)
    at_checkpoint = lost.weights()  # rebuilt from its last checkpoint, TF in a subprocess
    assert wb.runs().set_index("run_id").loc[run_id, "status"] == "lost"
    with pytest.raises(wb.ConfigError, match="Invalid value for argument 'run_id'. Received: run_id='nosuch'"):
        wb.load("nosuch")

    with wb.Cluster(engines=3) as cluster:
        with pytest.raises(wb.ConfigError, match="argument 'workers'.*divisor of the run's global batch of 64"):
            cluster.resume(run_id, steps=STEPS, workers=3)
        with pytest.raises(wb.ConfigError, match="argument 'steps'.*at least"):
            cluster.resume(run_id, steps=saved - 1)
        resumed = cluster.resume(run_id, steps=STEPS).wait(timeout=300)
        assert resumed.final_step == STEPS and resumed.run_dir == lost.run_dir
        first = [r for r in resumed.history.itertuples() if r.step == saved + 1]
        assert len(first) == 2, "the resumed run starts right after the checkpoint, on both workers"
        straight = cluster.train(wb.models.mlp((64, 32)), wb.datasets.digits(), strategy="single", workers=1,
                                 steps=STEPS, checkpoint_every=0, dashboard=False, **ARGS).wait(timeout=300)
        assert relative_difference(resumed.weights(), straight.weights()) < 1e-5
    full = wb.history(run_id)  # both attempts, read from the run directory
    for w in ("worker:0", "worker:1"):
        assert list(full[full.worker == w].step) == list(range(1, STEPS + 1)), "a step twice or missing"
    done = wb.load(run_id)
    assert done.status == "finished" and done.final_step == STEPS
    assert relative_difference(done.weights(), resumed.weights()) == 0
    assert relative_difference(at_checkpoint, done.weights()) > 1e-3, "the checkpoint's weights are earlier ones"

    listed = cli("runs")
    assert listed.returncode == 0 and run_id in listed.stdout and "finished" in listed.stdout, listed.stderr
    shown = cli("show", run_id[:-2])
    assert shown.returncode == 0, shown.stderr
    assert f"run {run_id}: multi_worker_mirrored" in shown.stdout and f"steps          {STEPS}/" in shown.stdout
    missing = cli("show", "nosuch")
    assert missing.returncode == 2 and "Invalid value for argument 'run_id'" in missing.stderr


def test_an_unknown_or_ambiguous_run_id_is_a_clear_error(tmp_path):
    for name in ("20260101-000000-aaaaaa", "20260101-000000-aaabbb", "20260102-000000-cccccc"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        store.write_json(tmp_path / "runs" / name / "run.json", {"strategy": "single", "workers": 1, "ps": 0})
    assert wb.load("20260102", home=tmp_path).id == "20260102-000000-cccccc"
    with pytest.raises(wb.ConfigError, match="prefix of exactly one run id; it starts 2"):
        wb.load("20260101-000000-aa", home=tmp_path)
    with pytest.raises(wb.ConfigError, match="the closest are: 20260101-000000-aaaaaa"):
        wb.load("20260101-000000-aaaaab", home=tmp_path)
