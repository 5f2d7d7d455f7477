"""Strategy adapters: one module per strategy, run on engines.

What a strategy is (its roles, whether it is synchronous, its defaults) is declared once,
without TensorFlow, in ``workbench.common.strategies``; the module of the same name here
holds only its TensorFlow side: ``SPEC`` (that spec) and ``train(job, ctx)``, which imports
TensorFlow inside. Adding a strategy means adding a spec there and a module here.
"""

import importlib
from types import ModuleType

from workbench.common import strategies as _specs

_MODULES: dict[str, ModuleType] = {}


def names() -> list[str]:
    """The names of all strategies, sorted (each has an adapter module here)."""
    return _specs.names()


def adapter(name: str) -> ModuleType:
    """The adapter module of strategy ``name`` (validated by the caller)."""
    if name not in _MODULES:
        _specs.spec(name)  # a KeyError for a name with no spec, before any import
        _MODULES[name] = importlib.import_module(f"{__name__}.{name}")
    return _MODULES[name]
