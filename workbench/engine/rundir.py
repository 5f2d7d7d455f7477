"""A run directory's files between an engine's host and the kernel, through ipyparallel,
for hosts that do not share the kernel's filesystem (``workbench.kernel.runs.files``): the
kernel pushes what a task reads (the checkpoints a resume starts from, the task's metrics
file as far as the resume keeps it) before the task starts, and pulls what it wrote
(metrics files; the chief's checkpoints, TensorBoard logs and profiles) after it ended.
The chief also sends each checkpoint as it saves it (``loop.save``, ``kernel/unshared.py``)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path


def _walk(root: Path, parts: list[str]):
    """(relative path, path) of each file that ``parts`` (files or folders) name under ``root``."""
    for part in parts:
        path = root / part
        if path.is_file():
            yield part, path
        elif path.is_dir():
            for f in sorted(path.rglob("*")):
                if f.is_file() and not f.name.endswith(".tmp"):
                    yield str(f.relative_to(root)), f


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def digests(run_dir: str, parts: list[str]) -> dict[str, str]:
    """``{path relative to run_dir: digest}`` of the files ``parts`` name (what a copy
    already holds, for ``read_files``' ``have``)."""
    return {rel: _digest(path.read_bytes()) for rel, path in _walk(Path(run_dir), parts)}


def read_files(run_dir: str, parts: list[str], have: dict[str, str] | None = None) -> dict[str, bytes]:
    """``{path relative to run_dir: bytes}`` of the files ``parts`` (relative paths of
    files or folders, read whole) name; missing ones are left out, and so are those whose
    digest is already in ``have`` (``digests`` of the copy they go to: sent only if changed)."""
    have = have or {}
    out = {}
    for rel, path in _walk(Path(run_dir), parts):
        data = path.read_bytes()
        if rel not in have or have[rel] != _digest(data):
            out[rel] = data
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
        # a name of this writer's own: two engines of one host (or two kernel threads) may
        # write the same file at once; each replaces it whole (seen: one renamed the other's
        # shared ".tmp" away, and the second rename failed)
        tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return len(files)
