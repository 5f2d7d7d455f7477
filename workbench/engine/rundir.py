"""A run directory's files between an engine's host and the kernel, through ipyparallel,
for hosts that do not share the kernel's filesystem (``workbench.kernel.remote``): the
kernel pushes what a task reads (the checkpoints a resume starts from, the task's metrics
file as far as the resume keeps it) before the task starts, and pulls what it wrote
(metrics files; the chief's checkpoints, TensorBoard logs and profiles) after it ended.
The chief also sends each checkpoint as it saves it (``loop.save``, ``kernel/unshared.py``)."""

from __future__ import annotations

import os
from pathlib import Path


def read_files(run_dir: str, parts: list[str]) -> dict[str, bytes]:
    """``{path relative to run_dir: bytes}`` of the files ``parts`` (relative paths of
    files or folders, read whole) name; missing ones are left out."""
    root = Path(run_dir)
    out = {}
    for part in parts:
        path = root / part
        if path.is_file():
            out[part] = path.read_bytes()
        elif path.is_dir():
            for f in sorted(path.rglob("*")):
                if f.is_file() and not f.name.endswith(".tmp"):
                    out[str(f.relative_to(root))] = f.read_bytes()
    return out


def write_files(run_dir: str, files: dict[str, bytes]) -> int:
    """Write ``files`` (as ``read_files`` returns them) under ``run_dir``, each atomically;
    returns how many. Paths must stay inside ``run_dir``."""
    root = Path(run_dir).resolve()
    for rel, data in files.items():
        path = (root / rel).resolve()
        if root not in path.parents:
            raise ValueError(f"Invalid value for argument 'files'. Received: a path {rel!r}. "
                             f"Expected paths inside the run directory {root}.")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return len(files)
