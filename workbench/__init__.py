"""workbench: try, see and teach distributed TensorFlow training from a notebook.

Importing this package does not import TensorFlow: TF runs on the engines.
"""

from workbench import datasets, models
from workbench.errors import (
    ClusterError,
    ClusterStartTimeout,
    ConfigError,
    EngineError,
    RunStalled,
    RunStopped,
    TestbedError,
    WorkbenchError,
)
from workbench.kernel.cluster import Cluster
from workbench.kernel.compare import compare
from workbench.kernel.recorded import load
from workbench.kernel.testbed import testbed
from workbench.schedules import linear_scaling
from workbench.store import history, runs

__version__ = "0.1.0"


def load_ipython_extension(ipython):
    """``%load_ext workbench``: the ``%wb`` magics (``workbench.kernel.magics``)."""
    from workbench.kernel import magics

    magics.load_ipython_extension(ipython)


__all__ = [
    "Cluster",
    "compare",
    "linear_scaling",
    "runs",
    "history",
    "load",
    "testbed",
    "datasets",
    "models",
    "WorkbenchError",
    "ConfigError",
    "ClusterError",
    "ClusterStartTimeout",
    "EngineError",
    "RunStalled",
    "RunStopped",
    "TestbedError",
]
