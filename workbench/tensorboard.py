"""TensorBoard on a run's logs, for the panel's button (the Jupyter server) and ``%wb
tensorboard`` (a kernel): one process per log directory, reused while it lives, on
127.0.0.1, ended with the process that started it (at exit, or by the kernel's death
signal on Linux)."""

import atexit
import signal
import socket
import subprocess
import sys
from os import PathLike

_boards = {}  # log directory -> (TensorBoard process, port)


def serve(logdir: str | PathLike) -> tuple[subprocess.Popen, int]:
    """``(process, port)`` of the TensorBoard serving ``logdir``: the running one, or a new
    one (it may take a few seconds to accept connections)."""
    process, port = _boards.get(str(logdir), (None, None))
    if process is None or process.poll() is not None:
        port = _free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", str(port), "--reload_interval", "2"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        _boards[str(logdir)] = (process, port)
    return process, port


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@atexit.register
def stop_all() -> None:
    """End every TensorBoard this process started."""
    for process, _ in _boards.values():
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
