"""HTTP API of the Workbench panel, under ``/workbench/api``:

- ``GET  state``: clusters and the newest runs (``workbench.store.Records.state``);
- ``POST runs/<id>/stop``: ask a running run to stop;
- ``POST runs/<id>/stacks``: every task's state, place and stacks, read now by the kernel
  that watches the run (``RunDir.request_stacks``; its watcher answers within a poll plus
  the read, 2 s at most per task); 504 when no kernel answers within ``wait`` s (a query
  argument, ``STACKS_WAIT`` by default);
- ``POST runs/<id>/tensorboard``: start (or reuse) TensorBoard on the run's logs, on
  127.0.0.1; returns its URL. TensorBoard processes end with the server.
"""

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from workbench import tensorboard
from workbench.store import Records, RunDir, RunSummary

if TYPE_CHECKING:
    from jupyter_server.serverapp import ServerApp

RUN_ID = r"[A-Za-z0-9_~-][A-Za-z0-9_.~-]*"  # what a run directory may be called (not "..")
URL_RUN_ID = r"[^/]+"  # checked against RUN_ID in the handler: a clear 400, not a bare 404
STACKS_WAIT = 15.0  # s for the watching kernel to answer a request for stacks


class _Base(APIHandler):
    @property
    def records(self) -> Records:
        return self.settings["workbench_records"]

    def _run(self, run_id: str) -> RunSummary:
        if not re.fullmatch(RUN_ID, run_id):
            raise web.HTTPError(400, f"run id {run_id!r} is not a workbench run id")
        run_dir = self.records.store.run(run_id)
        run = self.records.run(run_dir) if run_dir.path.is_dir() else None
        if run is None:
            raise web.HTTPError(404, f"no run {run_id!r} under {self.records.store.runs_dir}")
        return run

    def _api_path(self, path: str | None) -> str | None:
        """A notebook's OS path as a path under the server's root, or None outside it."""
        if not path:
            return None
        root = Path(self.settings["server_root_dir"]).resolve()
        try:
            return Path(path).resolve().relative_to(root).as_posix()
        except ValueError:
            return None


class StateHandler(_Base):
    @web.authenticated
    def get(self) -> None:
        state = self.records.state()
        for item in state["runs"] + state["clusters"]:
            item["notebook"] = self._api_path(item.get("notebook"))
        self.finish(json.dumps(state))


class StopHandler(_Base):
    @web.authenticated
    def post(self, run_id: str) -> None:
        run = self._run(run_id)
        if run["status"] != "running":
            raise web.HTTPError(409, f"run {run_id} is {run['status']}, not running")
        RunDir(run["run_dir"]).request_stop()
        self.finish(json.dumps({"run_id": run_id, "stopping": True}))


class StacksHandler(_Base):
    @web.authenticated
    async def post(self, run_id: str) -> None:
        run = self._run(run_id)
        if run["status"] != "running":
            raise web.HTTPError(409, f"run {run_id} is {run['status']}, not running: its tasks have no stacks")
        try:
            wait = float(self.get_argument("wait", str(STACKS_WAIT)))
        except ValueError:
            wait = -1.0
        if not 0 < wait <= 60:
            raise web.HTTPError(400, f"wait={self.get_argument('wait')!r}: expected seconds, more than 0 and at most 60")
        run_dir = RunDir(run["run_dir"])
        request = run_dir.request_stacks()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while (answer := run_dir.stacks_answer(request)) is None:
            if loop.time() > deadline:
                run_dir.withdraw_stacks(request)  # not answered later, to no one
                raise web.HTTPError(504, f"no kernel answered for run {run_id} within {wait:g} s: its stacks "
                                         "are read by the kernel that watches it (the one that started it, or one "
                                         "that attached to its cluster)")
            await asyncio.sleep(0.1)
        self.finish(json.dumps({"run_id": run_id, **answer}))


class TensorBoardHandler(_Base):
    @web.authenticated
    async def post(self, run_id: str) -> None:
        run = self._run(run_id)
        logdir = RunDir(run["run_dir"]).tensorboard_dir
        if not logdir.is_dir():
            raise web.HTTPError(404, f"run {run_id} wrote no TensorBoard logs ({logdir} is missing)")
        process, port = tensorboard.serve(logdir)
        for _ in range(300):  # until TensorBoard accepts connections (at most 60 s)
            if process.poll() is not None:
                raise web.HTTPError(500, f"TensorBoard exited with code {process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.2)
        else:
            raise web.HTTPError(504, "TensorBoard did not start within 60 s")
        self.finish(json.dumps({"run_id": run_id, "url": f"http://127.0.0.1:{port}/"}))


def setup(serverapp: "ServerApp") -> None:
    web_app = serverapp.web_app
    web_app.settings["workbench_records"] = Records()
    base = url_path_join(web_app.settings["base_url"], "workbench", "api")
    web_app.add_handlers(".*$", [
        (url_path_join(base, "state"), StateHandler),
        (url_path_join(base, "runs", f"({URL_RUN_ID})", "stop"), StopHandler),
        (url_path_join(base, "runs", f"({URL_RUN_ID})", "stacks"), StacksHandler),
        (url_path_join(base, "runs", f"({URL_RUN_ID})", "tensorboard"), TensorBoardHandler),
    ])
    serverapp.log.info("workbench panel API at %s (records in %s)", base, web_app.settings["workbench_records"].home)
