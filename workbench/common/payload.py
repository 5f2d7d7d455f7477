"""A job as bytes: cloudpickle, with the source of every function it carries by value.

cloudpickle ships the functions a notebook defines (``__main__``) by value: their code
objects, but not their source, which lives in the kernel only (IPython registers each
cell in ``linecache`` under a file name that exists nowhere on disk). cloudpickle 3.1.3
also renames every such code object's file ``<dynamic-code>``. On an engine, AutoGraph
then cannot read a user's loss to convert it (``inspect.findsource``: "could not get
source code"; an ``if`` on a tensor fails with OperatorNotAllowedInGraphError), and a
traceback through it shows neither file nor line.

``dumps`` pickles each code object with its own file name and that file's lines, as the
kernel sees them (a notebook cell's from ``linecache``, a script's or a test module's from
its file), each file once per payload. Unpickling (``code``, on an engine or in a kernel
that loads a recorded run) registers those lines in ``linecache`` before the code exists,
so before anything can trace it: ``inspect``, AutoGraph and tracebacks find the user's
source on every engine, on this host or another.
"""

from __future__ import annotations

import io
import linecache
import marshal
import types
from collections.abc import Iterator
from typing import Any

import cloudpickle

# The files whose code travelled by value, in or out of this process: a frame in one of
# them is the user's own (runs/watcher.py puts those frames first in an EngineError).
SHIPPED: set[str] = set()

Source = tuple[str, tuple[str, ...]]


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, each code object with its file name and source."""
    with io.BytesIO() as file:
        _Pickler(file, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return file.getvalue()


def code(marshalled: bytes, sources: tuple[Source, ...]) -> types.CodeType:
    """The code object ``dumps`` pickled, after its files' lines are in ``linecache``.

    A file whose lines here already are the shipped ones (the same file on a shared disk)
    is left as it is; otherwise the shipped lines are registered without a modification
    time, which ``linecache.checkcache`` never discards: they are what this code was
    compiled from."""
    for filename, lines in sources:
        SHIPPED.add(filename)
        if lines and linecache.getlines(filename) != list(lines):
            linecache.cache[filename] = (sum(map(len, lines)), None, list(lines), filename)
    return marshal.loads(marshalled)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler, whose code objects travel as ``marshal`` writes them (their
    file name kept) beside their files' source."""

    def __init__(self, file: io.BytesIO, protocol: int) -> None:
        super().__init__(file, protocol=protocol)
        self._sources: dict[str, Source] = {}

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.CodeType):
            files = sorted({c.co_filename for c in _codes(obj)})
            return code, (marshal.dumps(obj), tuple(self._source(f) for f in files))
        return super().reducer_override(obj)

    def _source(self, filename: str) -> Source:
        """``filename`` and its lines, one tuple per payload (pickle writes it once)."""
        if filename not in self._sources:
            linecache.checkcache(filename)
            self._sources[filename] = (filename, tuple(linecache.getlines(filename)))
            SHIPPED.add(filename)
        return self._sources[filename]


def _codes(c: types.CodeType) -> Iterator[types.CodeType]:
    """``c`` and the code objects nested in it (inner functions, lambdas, comprehensions)."""
    yield c
    for const in c.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)
