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
from workbench.kernel.testbed import testbed
from workbench.records import history, runs
from workbench.schedules import linear_scaling

__version__ = "0.1.0"

__all__ = [
    "Cluster",
    "compare",
    "linear_scaling",
    "runs",
    "history",
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
