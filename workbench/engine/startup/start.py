"""A local workbench engine: ipyparallel's engine, importing TensorFlow in a thread while
it registers with the controller, so that the first run does not wait for the import.

Keras imports scikit-learn (for ``keras.wrappers``) and matplotlib (for
``keras.visualization``) when they are installed: over a third of the CPU time of
``import tensorflow`` (bench/README.md), paid by every engine at once on a machine's few
cores. The start-up
import leaves them out, so those two Keras modules behave on engines as if the packages
were missing; scikit-learn and matplotlib themselves stay importable by any code.

Engines on hosts with GPUs skip the early import: ``CUDA_VISIBLE_DEVICES`` is set per
engine after registration and must come first.
"""

import faulthandler
import importlib.abc
import os
import sys
import threading

from workbench.common.roles import startup_env
from workbench.engine.startup import inventory


THREAD = "workbench-import-tensorflow"
OPTIONAL = ("sklearn", "matplotlib")  # what Keras imports if present, and engines need not


class _LeaveOut(importlib.abc.MetaPathFinder):
    """Keras's optional imports fail as if not installed, in the start-up import's thread
    only (``always``: in any thread, for the zygote's import, ``workbench.engine.startup.zygote``)."""

    def __init__(self, always: bool = False) -> None:
        self.always = always

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in OPTIONAL and (self.always or threading.current_thread().name == THREAD):
            raise ModuleNotFoundError(f"No module named {name!r} (left out of the engine's start-up import)",
                                      name=name)
        return None


def _import_tensorflow():
    finder = _LeaveOut()
    sys.meta_path.insert(0, finder)
    try:
        import tensorflow  # noqa: F401
    except Exception:  # noqa: BLE001 - the first task that imports it reports the error
        pass
    finally:
        sys.meta_path.remove(finder)


def report_crashes() -> None:
    """A fatal signal (a crash inside TF) prints every thread's stack into the engine's log.
    Into a copy of its stderr: ipykernel later points fd 2 at a pipe that a thread of this
    same process reads, and that thread dies with the process, mid-report."""
    global _crash_log
    _crash_log = os.fdopen(os.dup(2), "w")
    faulthandler.enable(file=_crash_log)


_crash_log = None


def main() -> None:
    report_crashes()
    if not inventory.gpus():
        os.environ.update(startup_env())
        threading.Thread(target=_import_tensorflow, name=THREAD, daemon=True).start()
    from ipyparallel.engine.app import main as engine_main

    engine_main()


if __name__ == "__main__":
    main()
