"""workbench: try, see and teach distributed TensorFlow training from a notebook.

Importing this package does not import TensorFlow: TF runs on the engines. Nor does it
import the kernel side: each public name is imported on first use (PEP 562), so the
Jupyter server, which loads the panel's extension (``workbench.lab``), never loads
``workbench.kernel``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__version__ = "0.1.0"

# every public name, once: where it lives (a module's own name: the module itself)
_HOMES = {
    "Cluster": "workbench.kernel.cluster",
    "compare": "workbench.kernel.views.compare",
    "linear_scaling": "workbench.schedules",
    "runs": "workbench.store",
    "history": "workbench.store",
    "load": "workbench.kernel.runs.recorded",
    "predict": "workbench.kernel.runs.explain",
    "calibrate_links": "workbench.kernel.testbed.calibrate",
    "testbed": "workbench.kernel.testbed.bed",
    "within": "workbench.testing",
    "predicted_vs_measured": "workbench.kernel.views.bars",
    "datasets": "workbench.datasets",
    "models": "workbench.models",
    "WorkbenchError": "workbench.errors",
    "ConfigError": "workbench.errors",
    "ClusterError": "workbench.errors",
    "ClusterStartTimeout": "workbench.errors",
    "EngineError": "workbench.errors",
    "ProfilerCrashed": "workbench.errors",
    "RunStalled": "workbench.errors",
    "RunStopped": "workbench.errors",
    "RunTimeout": "workbench.errors",
    "RunStateError": "workbench.errors",
    "TestbedError": "workbench.errors",
}

__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    module = importlib.import_module(home)
    value = module if home == f"workbench.{name}" else getattr(module, name)
    globals()[name] = value  # found once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext workbench``: the ``%wb`` magics (``workbench.kernel.magics``)."""
    from workbench.kernel import magics

    magics.load_ipython_extension(ipython)
