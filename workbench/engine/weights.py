"""The model weights of a run's last checkpoint, read in a process of its own (TensorFlow
stays out of the notebook kernel):

    python -m workbench.engine.weights RUN_DIR OUT.npz

Rebuilds the model from the run's ``job.pkl``, restores ``checkpoints/`` into it and saves
its weights, in ``run.weights()`` order, to OUT.npz.
"""

from __future__ import annotations

import os
import sys


def main(run_dir: str, out: str) -> int:
    import cloudpickle
    import numpy as np
    import tensorflow as tf

    from workbench.engine import build

    with open(os.path.join(run_dir, "job.pkl"), "rb") as f:
        job = cloudpickle.load(f)
    model = build.model(job)
    latest = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    if latest is None:
        raise FileNotFoundError(f"no checkpoint under {run_dir}/checkpoints")
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    weights = model.get_weights() if build.keras_model(model) else [w.numpy() for w in model.trainable_variables]
    with open(out, "wb") as f:
        np.savez(f, *[np.asarray(w) for w in weights])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
