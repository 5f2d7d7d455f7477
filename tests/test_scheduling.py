"""The suite's own scheduling on pytest-xdist's workers (tests/conftest.py), run on a small
suite of its own: a worker that dies fails the run at once, and nothing runs after it."""

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CONFTEST = f"""\
import importlib.util, sys

sys.path.insert(0, {str(HERE)!r})
spec = importlib.util.spec_from_file_location("suite_conftest", {str(HERE / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_configure = suite.pytest_configure
pytest_xdist_make_scheduler = suite.pytest_xdist_make_scheduler
pytest_unconfigure = suite.pytest_unconfigure
"""

# a file of SERIAL (one work unit): its first test kills its own worker once the other
# worker has started its file
DYING = """\
import os, signal, time
from pathlib import Path

def test_kills_its_worker():
    shared = Path(os.environ["SHARED"])
    deadline = time.monotonic() + 60
    while not (shared / "b started").exists():
        assert time.monotonic() < deadline, "test_b.py never started"
        time.sleep(0.01)
    (shared / "dying.tmp").write_text(str(os.getpid()))
    os.rename(shared / "dying.tmp", shared / "dying")
    os.kill(os.getpid(), signal.SIGKILL)

def test_after_the_crash():
    pass
"""

# the other worker's file: its first test waits until that worker is dead
OTHER = """\
import os, time
from pathlib import Path
import pytest
from workbench.common.pids import alive

@pytest.mark.parametrize("i", range(10))
def test_b(i):
    shared = Path(os.environ["SHARED"])
    if i == 0:
        (shared / "b started").touch()
        deadline = time.monotonic() + 60
        while not (shared / "dying").exists() or alive(int((shared / "dying").read_text())):
            assert time.monotonic() < deadline, "the other worker did not die"
            time.sleep(0.01)
    time.sleep(1)  # each test's own work: the ones not started when the worker died are not run
"""


def test_a_worker_that_dies_fails_the_run_at_once_and_nothing_runs_after_it(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 120\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_hosts.py").write_text(DYING)  # in SERIAL: one unit with the next file
    (tests / "test_testbed.py").write_text("def test_serial_after():\n    pass\n")
    (tests / "test_b.py").write_text(OTHER)
    (tmp_path / "shared").mkdir()
    (tmp_path / "tmp").mkdir()  # the suite's conftest makes a home there; the killed worker's stays in tmp_path
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-v", "-p", "no:cacheprovider"], cwd=tmp_path,
                          env=dict(os.environ, SHARED=str(tmp_path / "shared"), TMPDIR=str(tmp_path / "tmp")),
                          capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    # the crash is named in the failure's section and again in the short summary, whose line
    # is cut to the terminal's width: one test crashed, named at least once
    assert set(re.findall(r"worker '\w+' crashed while running '([^']+)'", out)) == \
        {"tests/test_hosts.py::test_kills_its_worker"}, out[-3000:]
    assert "crashed and worker restarting disabled" in out
    # no other worker ran the dead worker's unit, and the other worker stopped after the test
    # it was running and the next it held (xdist's LoadScopeScheduling ran all 10, then the
    # dead worker's file again on a new worker, which the crashing test killed again)
    assert "test_after_the_crash" not in out and "test_serial_after" not in out, out[-3000:]
    ran = re.findall(r"PASSED tests/test_b\.py::test_b\[(\d+)\]", out)
    assert 1 <= len(ran) <= 4, out[-3000:]
