"""The model weights of a run's last checkpoint, read in a process of its own (TensorFlow
stays out of the notebook kernel):

    python -m workbench.engine.weights RUN_DIR OUT.npz

Rebuilds the model from the run's ``job.pkl``, restores ``checkpoints/`` into it and saves
its weights, in ``run.weights()`` order, to OUT.npz.
"""

from __future__ import annotations

import sys


def main(run_dir: str, out: str) -> int:
    import cloudpickle
    import numpy as np
    import tensorflow as tf

    from workbench.engine import build
    from workbench.store import RunDir

    store = RunDir(run_dir)
    job = cloudpickle.loads(store.read_job())
    model = build.model(job)
    latest = tf.train.latest_checkpoint(str(store.checkpoints_dir))
    if latest is None:
        raise FileNotFoundError(f"no checkpoint under {store.checkpoints_dir}")
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    weights = model.get_weights() if build.keras_model(model) else [w.numpy() for w in model.trainable_variables]
    with open(out, "wb") as f:
        np.savez(f, *[np.asarray(w) for w in weights])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
