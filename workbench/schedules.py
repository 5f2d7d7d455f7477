"""Learning-rate schedules, as plain data the kernel checks and engines turn into Keras
schedules (no TensorFlow here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.common import validate
from workbench.errors import invalid

if TYPE_CHECKING:
    import keras


@dataclass(frozen=True)
class Warmup:
    """Ramp the learning rate linearly from ``start`` to ``peak`` over ``warmup_steps``
    steps, then hold it at ``peak``."""

    peak: float
    start: float
    warmup_steps: int

    def __call__(self, step: int) -> float:
        """The learning rate of training step ``step`` (0-based), as the engines compute it."""
        if step >= self.warmup_steps:
            return self.peak
        return self.start + (self.peak - self.start) * step / self.warmup_steps

    def keras(self) -> keras.optimizers.schedules.LearningRateSchedule:
        """The Keras schedule, built on the engine."""
        import keras

        peak, start, warmup = self.peak, self.start, self.warmup_steps

        class _Warmup(keras.optimizers.schedules.LearningRateSchedule):
            def __call__(self, step):
                ops = keras.ops
                step = ops.cast(step, "float32")
                if not warmup:
                    return ops.convert_to_tensor(peak, "float32")
                ramp = start + (peak - start) * step / warmup
                return ops.where(step < warmup, ramp, peak)

            def get_config(self):
                return {"peak": peak, "start": start, "warmup_steps": warmup}

        return _Warmup()


def linear_scaling(learning_rate: float, base_batch_size: int, global_batch_size: int, warmup_steps: int = 0) -> Warmup:
    """The linear scaling rule (Goyal et al. 2017): a global batch k times ``base_batch_size``
    trains with k times ``learning_rate``, reached by a linear warm-up from ``learning_rate``
    over ``warmup_steps`` steps. Pass the result as ``Cluster.train(learning_rate=...)``."""
    learning_rate = validate.positive_float("learning_rate", learning_rate)
    base = validate.positive_int("base_batch_size", base_batch_size)
    batch = validate.positive_int("global_batch_size", global_batch_size)
    warmup_steps = validate.positive_int("warmup_steps", warmup_steps, minimum=0)
    return Warmup(peak=learning_rate * batch / base, start=learning_rate, warmup_steps=warmup_steps)


def check(name: str, value: float | Warmup) -> float | Warmup:
    """A learning rate is a finite number > 0 or a schedule from this module."""
    if isinstance(value, Warmup):
        return value
    try:
        return validate.positive_float(name, value)
    except Exception:
        raise invalid(name, value, "a finite number > 0 or a schedule such as "
                      "wb.linear_scaling(0.1, base_batch_size=32, global_batch_size=256, warmup_steps=50)") from None
