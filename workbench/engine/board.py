"""TensorBoard event files under the run directory, written by the chief task."""

from __future__ import annotations


from workbench.store import RunDir


class Board:
    """Scalars at most every ``interval`` seconds (eager summary writes cost time on the
    chief, which a synchronous run waits for); ``force=True`` for evaluations."""

    def __init__(self, run_dir: str, enabled: bool, interval: float = 1.0) -> None:
        self._writer = None
        self._interval = interval
        self._last = float("-inf")
        if enabled:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(str(RunDir(run_dir).tensorboard_dir))

    def scalars(self, step: int, force: bool = False, **values: float | None) -> None:
        import time

        if self._writer is None or (not force and time.monotonic() - self._last < self._interval):
            return
        self._last = time.monotonic()
        import tensorflow as tf

        with self._writer.as_default():
            for name, value in values.items():
                if value is not None:
                    tf.summary.scalar(name, value, step=step)

    def flush(self) -> None:
        """Write what is buffered to the event files (before they are read and sent)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
