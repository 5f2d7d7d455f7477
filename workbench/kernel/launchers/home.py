"""Where the workbench keeps its own files (``workbench.store.Home`` names them): the
ipyparallel profile and the run directories, made on first use."""

from pathlib import Path

from workbench.store import Home


def profile_dir() -> Path:
    path = Home().profile_dir
    (path / "security").mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def runs_dir() -> Path:
    path = Home().runs_dir
    path.mkdir(parents=True, exist_ok=True)
    return path
