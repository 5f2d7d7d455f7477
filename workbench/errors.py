"""The workbench's exceptions: one small hierarchy, raised in the notebook kernel.

Messages follow Keras' shape: the argument, what was received, what was expected.
"""

from typing import Any


class WorkbenchError(Exception):
    """Base class of every error the workbench raises on purpose."""


class ConfigError(WorkbenchError, ValueError):
    """An argument is invalid; raised in the kernel before any engine is touched."""


class ClusterError(WorkbenchError):
    """The cluster could not start, connect, or is not in a usable state."""


class TestbedError(ClusterError):
    """Emulated hosts (``wb.testbed``) could not be made: no root, a missing package, a
    daemon that did not start. The message names what to install or fix."""


class ClusterStartTimeout(ClusterError, TimeoutError):
    """Engines did not register in time; the message carries the tail of their logs."""


class EngineError(WorkbenchError):
    """User or TensorFlow code failed on an engine.

    ``role``, ``task`` and ``engine_id`` say where; ``remote_traceback`` is the
    engine's own traceback text; ``stacks``, where the kernel read them as the run failed
    (a lost or hung task), every task's stacks as text, by task name.
    """

    def __init__(self, message: str, *, role: str | None = None, task: int | None = None,
                 engine_id: int | None = None, remote_traceback: str = "",
                 stacks: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.role = role
        self.task = task
        self.engine_id = engine_id
        self.remote_traceback = remote_traceback
        self.stacks = stacks or {}


class ProfilerCrashed(EngineError):
    """A task's process died inside TensorFlow's profiler as a ``run.profile()`` trace
    stopped (TF 2.21: ``TraceMeRecorder::Consume`` frees an invalid pointer while it
    merges events that began on one thread and ended on another). Measured here on
    2-worker MultiWorkerMirrored runs: 7 crashes in 191 traces, always of the non-chief
    worker; seen once under parameter averaging too (a segmentation fault in the same
    ``stop()``). ``run.resume()`` continues the run (from step 0 if it saved no checkpoint
    yet); tracing it again usually succeeds."""


class RunStalled(EngineError, TimeoutError):
    """A synchronous run stopped stepping: a task stopped, unreachable or stuck in the
    user's code while its peers waited for it (named within seconds: ``role``, ``task``
    and ``engine_id`` say which), or no step for longer than its stall timeout (the last
    resort). ``stacks``: every task's stacks as text when the run stopped, by task name."""


class RunStopped(WorkbenchError):
    """The run was stopped by the user before it finished."""


class RunTimeout(WorkbenchError, TimeoutError):
    """A call on a run (``wait(timeout=...)``, ``profile()``) gave up waiting: the run goes on."""


class RunStateError(WorkbenchError, RuntimeError):
    """A call a run cannot take in its state: ``profile()`` of an ended run, ``resume()``
    of one still running."""


def invalid(name: str, received: Any, expected: str, hint: str = "") -> ConfigError:
    """Return a ConfigError in the house shape.

    >>> str(invalid("workers", 0, "an int >= 1"))
    "Invalid value for argument 'workers'. Received: workers=0. Expected an int >= 1."
    """
    msg = f"Invalid value for argument '{name}'. Received: {name}={received!r}. Expected {expected}."
    if hint:
        msg += f" {hint}"
    return ConfigError(msg)
