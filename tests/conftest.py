"""Fixtures shared by the suite. Real clusters always stop (finalizers) and leave no PID."""

import glob
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import urllib.request

import pytest
from browser_tools import CHROMIUM, ROOT, free_port, wait_for
from checks import stop_process_tree

from workbench.common import roles

# Profiles, connection files and run directories of the suite live in a private place,
# never in the user's ~/.ipython or ~/.workbench; each pytest-xdist worker has its own (it
# inherits its controller's environment): two workers' clusters in one profile, or their
# runs in one runs directory listed by the panel and CLI tests, would see each other.
_HOME = tempfile.mkdtemp(prefix="workbench-tests-")
_set = os.environ.__setitem__ if "PYTEST_XDIST_WORKER" in os.environ else os.environ.setdefault
_set("WORKBENCH_HOME", os.path.join(_HOME, "workbench"))
_set("IPYTHONDIR", os.path.join(_HOME, "ipython"))

# The suite runs on two pytest-xdist workers (``-n 2``, the README's test command), a file at
# a time each: a machine of 2 cores is half idle in a serial run (measured: 47% busy in
# test_training, 50% in the host tests), waiting on engines, servers and links. The files
# that build emulated hosts (wb.testbed: one bridge and one address range per machine; the
# benchmarks' network lab among them) run one after the other on one worker, never beside
# each other.
SERIAL = {
    "tests/test_testbed.py", "tests/test_hosts.py", "tests/test_host_faults.py", "tests/test_host_hangs.py",
    "tests/test_host_rundir.py",
    "tests/test_launchers.py", "tests/test_links.py", "tests/test_link_runs.py", "tests/test_bench.py",
    "notebooks/01_data_vs_model_parallelism.ipynb", "notebooks/08_scaling_out.ipynb",
    "notebooks/09_network_bottleneck.ipynb",
}


def pytest_configure(config):
    """A crashed pytest-xdist worker is not replaced (``--max-worker-restart=0`` unless asked
    otherwise): a new worker collects the whole suite again, and what it would be given
    to run, the dead worker's file, would run beside the clusters and test bed that worker
    left behind. The crash fails the run (the scheduler below)."""
    if getattr(config.option, "maxworkerrestart", "unset") is None:
        config.option.maxworkerrestart = "0"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling by file (a file's tests share its module fixtures, a
    notebook's cells its kernel), with the ``SERIAL`` files as one unit. A worker that dies
    ends the run: its file goes to no other worker, and the others stop after the test they
    are running (xdist's own LoadScopeScheduling hands the dead worker's file, the crashed
    test first, to the next worker that asks, and lets the others run every file they were
    given)."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return "serial" if path in SERIAL else path

        def remove_node(self, node):
            """``node`` finished, or died: then its first test not done is the one it died in."""
            left = _left(self.assigned_work.pop(node))
            if left:
                self.workqueue.clear()
                for other in self.nodes:
                    self._withdraw(other)
            return left[0] if left else None

        def _withdraw(self, node):
            """Take back the tests ``node`` has not started: all but its first two not done
            (the one it runs, and the next, which an xdist worker holds to know its teardown)."""
            queued = _left(self.assigned_work[node])[2:]
            if queued:
                collection = self.registered_collections[node]
                node.send_steal([collection.index(nodeid) for nodeid in queued])

        def remove_pending_tests_from_node(self, node, indices):
            """The worker's answer to a withdrawal: the tests it gave back, or none when it had
            started one of them meanwhile (then asked again)."""
            if node not in self.assigned_work:  # it has ended since
                return
            if not indices:
                self._withdraw(node)
                return
            collection = self.registered_collections[node]
            for i in indices:
                self.assigned_work[node][self._split_scope(collection[i])].pop(collection[i])

    def _left(workload):
        """The tests of a worker's ``workload`` ({unit: {test: done}}) not done, in order."""
        return [nodeid for unit in workload.values() for nodeid, done in unit.items() if not done]

    return Scheduling(config, log)


@pytest.fixture(scope="module")
def cluster():
    """A real local cluster of 3 engines, shared by one test module."""
    import workbench as wb

    c = wb.Cluster(engines=3)
    c.start()
    yield c
    pids = [c.engine_info[e].pid for e in c.engine_info]
    tmpdirs = roles.engine_tmpdir(tempfile.gettempdir(), c.cluster_tag, "*")
    assert glob.glob(tmpdirs), "engines have their private TMPDIR"
    c.stop()
    from workbench.kernel.engines.processes import alive as _alive

    assert not [p for p in pids if _alive(p)], "engines left running after stop()"
    assert not glob.glob(tmpdirs), "engines' TMPDIRs left behind after stop()"


def pytest_unconfigure(config):
    """The suite's private home (profiles, run directories: hundreds of MB) goes with it;
    first the IPython shell some tests made closes its history database kept there."""
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        import atexit

        shell = InteractiveShell.instance()
        shell.atexit_operations()  # now, not at exit: once
        atexit.unregister(shell.atexit_operations)
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster4():
    """A real local cluster of 4 engines, shared by one test module."""
    import workbench as wb

    c = wb.Cluster(engines=4).start()
    yield c
    c.stop()


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on 127.0.0.1 with a token, serving a copy of the notebooks."""
    assert os.path.exists(CHROMIUM), "Debian's chromium is needed (tools/system-packages.sh installs it)"
    root = tmp_path / "root"
    shutil.copytree(ROOT / "notebooks", root)
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, WORKBENCH_HOME=str(tmp_path / "home"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}", f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
         "--LabApp.news_url=", "--ServerApp.open_browser=False", "--allow-root"],
        stdout=open(tmp_path / "lab.log", "wb"), stderr=subprocess.STDOUT, env=env,
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        try:
            return urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).status == 200
        except OSError:
            return server.poll() is not None

    try:
        wait_for(up, 120, lambda: (tmp_path / "lab.log").read_text()[-2000:])
        assert server.poll() is None, (tmp_path / "lab.log").read_text()[-3000:]
        yield base, token, server
    finally:  # the server shuts its kernels down; each stops its cluster
        stop_process_tree(server, "processes left behind by the notebook")


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic"])
        try:
            yield b
        finally:
            b.close()
