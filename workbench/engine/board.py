"""TensorBoard event files under the run directory, written by the chief task."""

import os


class Board:
    def __init__(self, run_dir, enabled):
        self._writer = None
        if enabled:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(os.path.join(run_dir, "tensorboard"))

    def scalars(self, step, **values):
        if self._writer is None:
            return
        import tensorflow as tf

        with self._writer.as_default():
            for name, value in values.items():
                if value is not None:
                    tf.summary.scalar(name, value, step=step)

    def close(self):
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
