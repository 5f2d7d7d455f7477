"""A thread in every engine that answers the kernel while the engine's main thread trains.

An ipyparallel engine executes one request at a time, in its main thread, and a run's
task holds that thread until the run ends: nothing sent through ipyparallel is read
before then (a kernel bound with ``bind_kernel`` shares that same shell channel). This
thread listens on the engine's own address (the one its TF peers reach, so the kernel
reaches it on any host it reaches TF ports on), on a port of its own, and serves two
requests, each carrying a token that only the kernel got (through ipyparallel's signed
inventory):

- ``stacks``: every thread's Python stack (``sys._current_frames``: the main thread is
  inside TensorFlow with the GIL released, so this thread runs), each frame marked when
  it is the user's own code (a file whose code the kernel shipped, ``common/payload.py``),
  and for a frame in TensorFlow's ``quick_execute`` the op or ``tf.function`` it executes;
- ``exec``: Python run in a namespace that holds the running task's objects (``model``,
  ``optimizer``, ``step``, ``strategy``, ``job``, ``task``; ``live``), for ``run.console``.

It costs an idle thread blocked in ``accept`` until asked. One request per connection, a
JSON line each way.
"""

from __future__ import annotations

import ast
import hmac
import io
import json
import os
import secrets
import socket
import sys
import threading
import traceback
from typing import Any

from workbench.common.sockets import read_line

THREAD = "workbench-debug"
LIVE: dict[str, Any] = {}  # the running task's objects (``track``), for the console
_server: dict[str, Any] = {}  # this engine's server: "target", "token", "pid"
_namespace: dict[str, Any] = {}  # the console's globals, kept between requests


def serve(address: str) -> dict[str, Any]:
    """Start this engine's debug thread on ``address`` (once per process: an engine asked
    again answers with the same server). Returns what the kernel needs to reach it:
    ``{"target": "address:port", "token": ..., "pid": this process's own PID}``."""
    if not _server:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((address, 0))
        listener.listen(8)
        token = secrets.token_hex(16)
        _server.update(target=f"{address}:{listener.getsockname()[1]}", token=token, pid=os.getpid())
        threading.Thread(target=_accept, args=(listener, token), name=THREAD, daemon=True).start()
    return dict(_server)


def track(**objects: Any) -> None:
    """What the task that starts now works with, for the console (``LIVE``): replaces the
    last task's objects."""
    LIVE.clear()
    LIVE.update(objects)


def _accept(listener: socket.socket, token: str) -> None:
    while True:
        conn, _ = listener.accept()
        # one thread per request: a console's long statement does not hold up a stack dump
        threading.Thread(target=_answer, args=(conn, token), name=f"{THREAD}-request", daemon=True).start()


def _answer(conn: socket.socket, token: str) -> None:
    with conn:
        conn.settimeout(30)
        try:
            request = json.loads(read_line(conn))
            if not hmac.compare_digest(str(request.get("token", "")), token):
                reply = {"error": "wrong token"}
            elif request.get("op") == "stacks":
                reply = {"pid": os.getpid(), "threads": stacks()}
            elif request.get("op") == "exec":
                reply = run_code(str(request.get("code", "")))
            else:
                reply = {"error": f"unknown request {request.get('op')!r}"}
        except Exception as e:  # noqa: BLE001 - said to the kernel, never raised into this thread
            reply = {"error": f"{type(e).__name__}: {e}"}
        try:
            conn.sendall(json.dumps(reply, default=repr).encode() + b"\n")
        except OSError:
            pass


def stacks() -> list[dict[str, Any]]:
    """Every thread's stack, outermost frame first: ``{"name", "ident", "main", "daemon",
    "frames": [[file, line, function, source, user, op], ...]}``; the debug threads' own left out."""
    from workbench.common.payload import SHIPPED

    frames = sys._current_frames()
    threads = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in frames.items():
        thread = threads.get(ident)
        if thread is not None and thread.name.startswith(THREAD):
            continue
        rows = []
        for f, line in traceback.walk_stack(frame):
            code = f.f_code
            op = _op(f)
            rows.append([code.co_filename, line, code.co_name, _source(code.co_filename, line),
                         code.co_filename in SHIPPED or code.co_filename == "<dynamic-code>", op])
        rows.reverse()
        out.append({"name": thread.name if thread else f"thread {ident}", "ident": ident,
                    "main": thread is threading.main_thread(), "daemon": bool(thread and thread.daemon),
                    "frames": rows})
    return out


def _op(frame) -> str | None:
    """The TF op (a ``tf.function`` runs as one op, ``__inference_<name>_<n>``) that a
    frame of TensorFlow's ``quick_execute`` executes: what the thread waits for."""
    if frame.f_code.co_name != "quick_execute" or not frame.f_code.co_filename.endswith("eager/execute.py"):
        return None
    op = frame.f_locals.get("op_name")
    return op.decode() if isinstance(op, bytes) else op


def _source(filename: str, line: int) -> str:
    import linecache

    return linecache.getline(filename, line).strip()


def run_code(code: str) -> dict[str, Any]:
    """Run ``code`` as a console does: statements executed, the value of a last expression
    returned as its repr, what ``print`` wrote collected (``print`` only: the engine's
    streams belong to its task). Errors come back as their traceback text."""
    out = io.StringIO()
    namespace = _console_namespace()
    namespace["print"] = lambda *args, **kw: print(*args, **{**kw, "file": kw.get("file") or out})
    try:
        tree = ast.parse(code, "<console>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<console>", "exec"), namespace)  # noqa: S102 - the console's purpose
        value = eval(compile(ast.Expression(last.value), "<console>", "eval"), namespace) if last else None
    except BaseException:  # noqa: BLE001 - the user's error, shown in their console
        return {"output": out.getvalue(), "error": traceback.format_exc()}
    finally:
        namespace.pop("print", None)
    return {"output": out.getvalue(), "value": None if value is None else repr(value)}


def _console_namespace() -> dict[str, Any]:
    """The console's globals: the engine's own namespace (what ipyparallel's ``push`` and
    ``execute`` see), the running task's objects, kept between requests."""
    if not _namespace:
        try:
            from IPython import get_ipython

            shell = get_ipython()
            _namespace.update(shell.user_ns if shell is not None else {})
        except ImportError:
            pass
        _namespace["__name__"] = "__console__"
    _namespace.update(LIVE, live=LIVE)
    return _namespace
