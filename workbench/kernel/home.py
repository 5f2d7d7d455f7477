"""Where the workbench keeps its own files: ipyparallel profile, run directories."""

import os
from pathlib import Path


def home():
    """``$WORKBENCH_HOME``, or ``~/.workbench``: never the user's own IPython directory."""
    return Path(os.environ.get("WORKBENCH_HOME") or Path.home() / ".workbench")


def profile_dir():
    path = home() / "ipython" / "profile_workbench"
    (path / "security").mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def runs_dir():
    path = home() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path
