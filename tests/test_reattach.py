"""A run on an attached cluster (``ipcluster start --profile p``) outlives its kernel: after
the kernel is killed, another one attaches, ``wb.load`` finds the run still training, its
dashboard is live again and ``stop()`` works; the cluster's engines then resume it."""

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

import workbench as wb
from workbench.common.roles import engine_tmpdir
from workbench.kernel.engines.processes import sweep_engine_tmpdirs
from workbench.kernel.runs.recorded import RecordedRun
from workbench.kernel.runs.handle import Run
from checks import stop_process_tree, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PROFILE = "wb-reattach"

KERNEL = textwrap.dedent(f"""
    import time
    import ipyparallel as ipp
    import workbench as wb

    ipp.Client(profile={PROFILE!r}).wait_for_engines(2, timeout=120, interactive=False)
    cluster = wb.Cluster(profile={PROFILE!r}).start()
    run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="multi_worker_mirrored",
                        workers=2, steps=10**7, global_batch_size=64, checkpoint_every=100, dashboard=False)
    print(run.run_dir, flush=True)
    while True:
        time.sleep(1)
""")


@pytest.fixture
def ipcluster():
    from IPython.paths import get_ipython_dir

    proc = subprocess.Popen([sys.executable, "-m", "ipyparallel.cluster", "start", f"--profile={PROFILE}", "--n=2",
                             "--log-level=40"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    security = os.path.join(get_ipython_dir(), f"profile_{PROFILE}", "security")
    try:
        wait_for(lambda: os.path.isdir(security) and any(f.endswith("-client.json") for f in os.listdir(security)),
                 120, lambda: f"the controller's connection file in {security}; ipcluster exit code {proc.poll()}")
        yield proc
    finally:  # on SIGINT ipcluster stops its engines and controller
        stop_process_tree(proc, "ipcluster's processes", ask=signal.SIGINT)
        # it kills its engines: the private TMPDIRs the workbench gave them would wait for the
        # next Cluster() to sweep them (those of engines whose process is gone)
        sweep_engine_tmpdirs()
        assert not glob.glob(engine_tmpdir(tempfile.gettempdir(), PROFILE, "*")), "an engine of ipcluster outlived it"


def test_a_run_on_an_attached_cluster_is_picked_up_live_after_its_kernel_dies(ipcluster):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        run_dir = kernel.stdout.readline().strip()
        assert run_dir, kernel.stderr.read()[-3000:]
        wait_for(lambda: os.path.isdir(run_dir + "/metrics") and len(os.listdir(run_dir + "/metrics")) == 2
                 and len(wb.history(run_dir)) > 100, 180, lambda: "steps in the run's metrics")
    finally:
        kernel.send_signal(signal.SIGKILL)  # the kernel process this test started
        kernel.wait(30)
    run_id = os.path.basename(run_dir)
    assert wb.runs().set_index("run_id").loc[run_id, "status"] == "lost"  # as far as the files know

    with wb.Cluster(profile=PROFILE) as cluster:
        run = wb.load(run_id)
        assert isinstance(run, Run) and not isinstance(run, RecordedRun) and not run.done, run
        seen = run.step
        wait_for(lambda: run.step > seen + 50, 60, lambda: f"the run going on past step {seen}: at {run.step}")
        board = run.dashboard()
        wait_for(lambda: board.progress.value > seen + 50 and board.updates > 2, 30,
                 lambda: f"the dashboard following the run: {board.progress.value}, {board.updates} updates")
        run.stop(timeout=60)
        assert run.done and run.stopped, run
        h = run.history
        last = h.groupby("worker").step.max()
        assert last["worker:0"] == last["worker:1"] == run.final_step
        assert wb.runs().set_index("run_id").loc[run_id, "status"] == "stopped"
        # the engines it ran on are this kernel's now: the run goes on there to an exact count
        resumed = cluster.resume(run_id, steps=run.final_step + 40).wait(timeout=300)
        assert resumed.final_step == run.final_step + 40
    full = wb.history(run_id)
    for w in ("worker:0", "worker:1"):
        assert list(full[full.worker == w].step) == list(range(1, resumed.final_step + 1))
