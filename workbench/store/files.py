"""Writing and reading the store's files. Every whole-file write goes to a temporary file
in the same directory and is renamed over the target (``os.replace``, atomic on POSIX):
a reader polling the file (the panel, once a second) sees the old content or the new,
never half of it."""

import json
import os
from pathlib import Path
from typing import Any


def _temporary(path: Path) -> Path:
    # one writer process per name: two kernels writing the same file never share a temp
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    write_bytes(path, text.encode())


def write_json(path: str | os.PathLike, record: Any) -> None:
    """Write ``record`` as JSON to ``path`` atomically."""
    write_text(path, json.dumps(record, indent=1, default=str))


def read_json(path: str | os.PathLike) -> Any | None:
    """The JSON in ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_lines(path: str | os.PathLike, offset: int = 0) -> tuple[list[dict], int]:
    """The JSON rows of the complete lines of ``path`` after byte ``offset``, and the offset
    to read from next: a line being appended is read once it is whole, lines that do not
    parse (cut short when their writer died) are skipped."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    rows = []
    for line in chunk[:end].splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows, offset + end


def read_text_lines(path: str | os.PathLike, offset: int = 0) -> tuple[str, int]:
    """The text of the complete lines of ``path`` after byte ``offset`` (undecodable bytes
    replaced), and the offset to read from next: a line being appended is read once whole."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return "", offset
    end = chunk.rfind(b"\n") + 1
    return chunk[:end].decode("utf-8", errors="replace"), offset + end
