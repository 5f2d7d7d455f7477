"""The store: what runs and clusters leave on disk under ``$WORKBENCH_HOME``, its one
owner. ``RunDir`` names every file of a run directory and reads and writes them (``STOP``
through ``request_stop`` / ``stop_requested``); ``Home`` the run directories and the
cluster records; ``Records`` reads them all back for the panel, ``wb.runs()`` and ``%wb``.
Whole files are written atomically (a temporary file renamed over the target).

The kernel, the engines, the CLI and the Jupyter server all use it; it imports neither
TensorFlow nor ipyparallel, nor anything of ``workbench.kernel``.
"""

from workbench.store.files import read_json, write_json
from workbench.store.layout import Home, RunDir, home
from workbench.store.records import Records, history, runs
from workbench.store.schema import (
    ClusterRecord,
    EngineRecord,
    ResultRecord,
    RunRecord,
    RunSummary,
    State,
    TaskRecord,
)

__all__ = [
    "ClusterRecord",
    "EngineRecord",
    "Home",
    "Records",
    "ResultRecord",
    "RunDir",
    "RunRecord",
    "RunSummary",
    "State",
    "TaskRecord",
    "history",
    "home",
    "read_json",
    "runs",
    "write_json",
]
