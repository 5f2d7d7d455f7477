"""A local workbench engine: ipyparallel's engine, importing TensorFlow in a thread while
it registers with the controller, so that the first run does not wait for the import.

Engines on hosts with GPUs skip the early import: ``CUDA_VISIBLE_DEVICES`` is set per
engine after registration and must come first.
"""

import os
import threading

from workbench.common.roles import STARTUP_ENV
from workbench.engine import inventory


def _import_tensorflow():
    try:
        import tensorflow  # noqa: F401
    except Exception:  # noqa: BLE001 - the first task that imports it reports the error
        pass


def main():
    if not inventory._gpus():
        os.environ.update(STARTUP_ENV)
        threading.Thread(target=_import_tensorflow, name="workbench-import-tensorflow", daemon=True).start()
    from ipyparallel.engine.app import main as engine_main

    engine_main()


if __name__ == "__main__":
    main()
