"""A zygote: one process imports TensorFlow once, then forks every local engine.

Cold start is bound by each engine importing TensorFlow (about 2.3 CPU-s each; 4 engines
take both cores of a laptop for ~5 s). The zygote pays it once: ``python -m
workbench.engine.startup.zygote SOCKET`` imports TensorFlow and ipyparallel's engine, checks that
it is still one thread, and then, for each engine a launcher starts
(``workbench.engine.startup.forked``, the launcher's command), forks a child that becomes that
engine with the launcher's arguments, environment and standard streams.

Fork safety is checked, not assumed: TensorFlow's import starts no thread of its own, and
nothing here creates a TF runtime, an op or a device before forking; numpy's OpenBLAS
starts a thread pool at import unless ``OPENBLAS_NUM_THREADS=1`` (the kernel sets it for
the zygote, so its engines run numpy on one thread; TensorFlow's ops do not use OpenBLAS).
The zygote counts its threads (``/proc/self/task``) before every fork and exits with
``REFUSED`` if there is more than one; the engines' launcher command then starts them
the usual way (``workbench.engine.startup.start``). Hosts with GPUs never use it: CUDA's state
must not cross a fork, and ``CUDA_VISIBLE_DEVICES`` must be set before the import.

Children die with the zygote (``PR_SET_PDEATHSIG``), so ending it (the cluster's stop,
or its reaper when the kernel dies) ends every engine it forked. Each also dies with the
launcher's process that stands in for it (``workbench.engine.startup.forked``): killing either ends
both.

On other hosts (SSH clusters, ``kernel/zygote.py``'s ``start_remote``) the kernel starts one
zygote per host over ``ssh``, with ``OWNER`` 0: it serves until that ssh session ends, which
it sees as the end of its standard input (the kernel's ``ssh`` process is one of the
cluster's local processes, ended by its stop or its reaper), and refuses on hosts with
GPUs. Its socket path holds ``{host}``, this host's name, so that hosts sharing a
filesystem never share a zygote; it writes its PID beside it (``PATH.pid``) for the
engines' launcher commands, which cannot know it.
"""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import sys
import threading

from workbench.common.roles import startup_env

REFUSED = 3  # exit status: more than one thread at fork time
_PR_SET_PDEATHSIG = 1


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _import() -> None:
    """What every engine imports: TensorFlow (Keras' optional scikit-learn and matplotlib
    left out, as ``workbench.engine.startup.start`` does) and ipyparallel's engine."""
    from workbench.engine.startup import start

    finder = start._LeaveOut(always=True)
    sys.meta_path.insert(0, finder)
    try:
        import tensorflow  # noqa: F401
    finally:
        sys.meta_path.remove(finder)
    import ipyparallel.engine.app  # noqa: F401


def _die_with_parent() -> None:
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _child(conn: socket.socket, listener: socket.socket, request: dict, fds: list[int]) -> None:
    """Become the engine: the launcher's streams, environment and arguments."""
    listener.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # subprocesses of the engine are waited for
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _die_with_parent()
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        os.close(fd)
    # conn stays open in this process only: when the engine exits, the launcher's process sees
    # EOF; and when that process goes (killed: what stops an engine on another host), so does this
    threading.Thread(target=_die_with_stand_in, args=(conn,), name="workbench-stand-in", daemon=True).start()
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(startup_env())  # as workbench.engine.startup.start sets them
    os.chdir(request["cwd"])
    from workbench.engine.startup.start import report_crashes

    report_crashes()
    sys.argv = ["ipengine", *request["argv"]]
    code = 0
    try:
        from ipyparallel.engine.app import main

        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - printed to the engine's log, as an engine would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        from workbench.engine.startup.inventory import remove_tmpdir

        remove_tmpdir()  # os._exit skips atexit, and the zygote's handlers must not run here
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _die_with_stand_in(conn: socket.socket) -> None:
    try:
        while conn.recv(4096):  # interrupted calls are retried by Python itself (PEP 475)
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def host_path(path: str) -> str:
    """``path`` with ``{host}`` replaced by this host's name."""
    return path.replace("{host}", socket.gethostname())


def serve(path: str, owner: int) -> None:
    """Import, then fork an engine per request on the unix socket ``path``, until the
    kernel ``owner`` that started it stops it or is gone (its engines go with it).
    ``owner`` 0: the process that started this one (on another host: its ssh session)."""
    path = host_path(path)
    session = owner == 0  # started over ssh: it ends when its standard input does
    if session:
        owner = os.getppid()
    try:  # the forked engines leave through os._exit, never through this finally
        if session and _has_gpus():  # CUDA's state must not cross a fork: engines here start the usual way
            _refuse(path, session, "this host has GPUs")
        _write_pid(path, str(os.getpid()))
        _serve(path, owner, session)
    finally:
        _remove(path, path + ".pid")


def _has_gpus() -> bool:
    from workbench.engine.startup.inventory import gpus

    return bool(gpus())


def _remove(*paths: str) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def _write_pid(path: str, content: str) -> None:
    with open(path + ".pid.tmp", "w") as f:
        f.write(content)
    os.rename(path + ".pid.tmp", path + ".pid")


def _refuse(path: str, session: bool, reason: str) -> None:
    """Fork nothing. Over ssh, say so to the engines' launcher commands (``PATH.pid`` reads
    "refused": they start their engines the usual way at once) until the session ends."""
    print(f"zygote: {reason}; not forking", file=sys.stderr, flush=True)
    if session:
        _write_pid(path, "refused")
        while os.read(0, 4096):
            pass
    sys.exit(REFUSED)


def _serve(path: str, owner: int, session: bool) -> None:
    _import()
    if threads() != 1:
        _refuse(path, session, f"{threads()} threads after the import")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel, never zombies
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    os.rename(path + ".tmp", path)  # it appears ready to connect to
    listener.listen(64)
    listener.settimeout(1.0)  # accepted connections block
    watched = [listener, 0] if session else [listener]
    while True:
        ready, _, _ = select.select(watched, [], [], 1.0)  # the timeout is for watching the owner
        if 0 in ready and not os.read(0, 4096):  # its ssh session ended (the kernel's ssh process is gone)
            sys.exit(0)
        if listener not in ready:
            if os.getppid() != owner:  # the kernel ended before Cluster.stop() or its reaper ended this
                _remove(path + ".log")  # a local zygote's output, no one's to read now
                sys.exit(0)
            continue
        try:
            conn, _ = listener.accept()
        except (TimeoutError, BlockingIOError):
            continue
        with conn:
            msg, fds = _receive(conn)
            if msg is None:
                continue
            if threads() != 1:  # never fork a process with threads
                conn.sendall(json.dumps({"refused": threads()}).encode() + b"\n")
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:
                _child(conn, listener, msg, fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _receive(conn: socket.socket) -> tuple[dict | None, list[int]]:
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_LEN(3 * array.array("i").itemsize))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(payload[: len(payload) - len(payload) % a.itemsize])
                fds.extend(a)
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), fds


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
