"""Fixtures shared by the suite. Real clusters always stop (finalizers) and leave no PID."""

import os
import tempfile

import pytest

# Profiles, connection files and run directories of the suite live in a private place,
# never in the user's ~/.ipython or ~/.workbench.
_HOME = tempfile.mkdtemp(prefix="workbench-tests-")
os.environ.setdefault("WORKBENCH_HOME", os.path.join(_HOME, "workbench"))
os.environ.setdefault("IPYTHONDIR", os.path.join(_HOME, "ipython"))


@pytest.fixture(scope="module")
def cluster():
    """A real local cluster of 3 engines, shared by one test module."""
    import workbench as wb

    c = wb.Cluster(engines=3)
    c.start()
    yield c
    pids = [c.engine_info[e].pid for e in c.engine_info]
    c.stop()
    from workbench.kernel.processes import alive as _alive

    assert not [p for p in pids if _alive(p)], "engines left running after stop()"
