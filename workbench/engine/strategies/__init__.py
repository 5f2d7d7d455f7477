"""Strategy adapters: one module per strategy, each run on engines.

Every adapter module declares, at import time and without importing TensorFlow:

- ``ROLES``: the roles its tasks take, in launch order ("chief", "ps", "worker", "local");
- ``MULTI_ENGINE``: whether it spans several engines joined by a TF cluster;
- ``SYNC_WORKERS``: whether its workers move in lockstep over collectives, splitting each
  global batch between them (such runs can hang when a peer is lost: the kernel watches them);
- ``DESCRIPTION``: one line for docs and error messages;

and defines ``train(job, ctx)``, which imports TensorFlow inside. Adding a strategy means
adding a module here; the registry below finds it by name.
"""

import importlib
import pkgutil
from types import ModuleType

_MODULES = {}


def names() -> list[str]:
    """The names of all strategy adapters, sorted."""
    return sorted(
        m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")
    )


def get(name: str) -> ModuleType:
    """The adapter module for ``name`` (validated by the caller)."""
    if name not in _MODULES:
        _MODULES[name] = importlib.import_module(f"{__name__}.{name}")
    return _MODULES[name]
