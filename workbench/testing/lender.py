"""``Lender``: one local cluster that the notebooks of a test session share.

The pytest plugin (``workbench/testing/plugin.py``) makes one per session, in pytest's own
process, when the first notebook that uses the workbench starts; its offer goes to that
notebook's kernel through the environment (``launchers/borrowed.py``). The kernel's
``wb.Cluster(n)`` then borrows n engines instead of starting a controller, a zygote and
engines of its own (seconds per notebook, and memory), and asks the lender to recycle
engines when its topology changes. The lender starts the cluster at the first request, with
the engines asked for, and starts a larger one when a notebook asks for more.

Between notebooks (``reclaim``), and before it lends, it makes every engine fresh: a run a
notebook left training (its kernel is killed, not asked to stop) ends with its engines, and
engines holding TensorFlow state (each engine says which: ``inventory.tf_state``) are
replaced. So each notebook starts on fresh engines, as with a cluster of its own. ``stop``
ends everything; a reaper ends it too if pytest dies (``Cluster.start``).

Requests come over a Unix socket in a private directory, authenticated with a key that
only the environment of the lender's children holds (``multiprocessing.connection``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
from multiprocessing.connection import Listener

from workbench.engine.startup import inventory
from workbench.kernel.cluster import Cluster
from workbench.kernel.engines.processes import alive
from workbench.kernel.launchers.borrowed import ENV


class Lender:
    """The session's shared cluster and the thread that answers its borrowers."""

    def __init__(self, timeout: float = 120) -> None:
        self.timeout = timeout
        self.cluster: Cluster | None = None  # started by the first "lend"
        self._dir = tempfile.mkdtemp(prefix="wb-suite-")  # mode 0700
        self._address = os.path.join(self._dir, "lender.sock")
        self._key = secrets.token_bytes(32)
        self._listener = Listener(self._address, family="AF_UNIX", authkey=self._key)
        self._borrower: tuple[int, str] | None = None  # (kernel pid, token) of the cluster using it
        self._lent: set[int] = set()
        self._lock = threading.Lock()  # requests, and the plugin's reclaim and stop
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name="workbench-suite-lender", daemon=True)
        self._thread.start()

    def environ(self) -> dict[str, str]:
        """What a kernel started now inherits to borrow from this lender."""
        return {ENV: json.dumps({"address": self._address, "authkey": self._key.hex(), "lender": os.getpid()})}

    # -- requests -------------------------------------------------------------------------
    def _serve(self):
        from multiprocessing import AuthenticationError

        while not self._closing:
            try:
                conn = self._listener.accept()
            except AuthenticationError:
                continue
            except OSError:
                return
            with conn:
                try:
                    kind, *args = conn.recv()
                    with self._lock:
                        reply = {"ok": getattr(self, f"_{kind}")(*args)}
                except (EOFError, OSError):
                    continue
                except Exception as e:  # noqa: BLE001 - the borrower raises it as a ClusterError
                    reply = {"error": f"{type(e).__name__}: {e}"}
                conn.send(reply)

    def _lend(self, borrower: tuple[int, str], n: int) -> dict | None:
        """``n`` fresh idle engines for ``borrower``, or None while another cluster of a
        live kernel borrows them (that one then starts its own)."""
        if self._borrower not in (None, borrower) and alive(self._borrower[0]):
            return None
        if self.cluster is not None and len(self.cluster.pool) < n:
            # more engines than it has: a new cluster of n (engines added to a running one
            # were measured to take lent engines down with them: "Engine 2 died")
            self.cluster.stop()
            self.cluster = None
        if self.cluster is None:
            self.cluster = Cluster(engines=n, timeout=self.timeout).start()
        else:
            self._refresh()
        ids = sorted(self.cluster.pool.info)
        self._borrower, self._lent = borrower, set(ids[:n])
        launched = self.cluster.launched
        return {"cluster_id": launched.cluster_id, "controller_pid": launched.controller_pid,
                "zygote": launched.started_by_zygote, "engines": ids[:n], "others": ids[n:],
                "connection_file": os.path.join(launched.ipp.profile_dir, "security",
                                         f"ipcontroller-{launched.cluster_id}-client.json")}

    def _recycle(self, borrower: tuple[int, str], engine_ids: list[int]) -> None:
        """Replace engines of ``borrower``'s: they register before the answer goes out."""
        if borrower != self._borrower or not set(engine_ids) <= self._lent:
            raise ValueError(f"engines {engine_ids} are not lent to this cluster (lent: {sorted(self._lent)})")
        mapping = self.cluster.recycle(engine_ids)
        self._lent = (self._lent - set(mapping)) | set(mapping.values())

    def _release(self, borrower: tuple[int, str]) -> None:
        """``borrower`` stopped: a run it left training ends now (its engines replaced)."""
        if borrower == self._borrower:
            self._borrower, self._lent = None, set()
            busy = self._busy()
            if busy:
                self.cluster.recycle(busy)

    def _output(self, engine_id: int, lines: int) -> str:
        return self.cluster.engine_output(engine_id, lines)

    # -- fresh engines ----------------------------------------------------------------------
    def _busy(self):
        status = self.cluster.client.queue_status()
        return [e for e in self.cluster.pool.info if isinstance(status.get(e), dict) and status[e].get("queue")]

    def _refresh(self):
        """Every engine alive, idle and without TensorFlow state: dead ones, busy ones (a
        run its notebook left training) and those holding a run's state are replaced."""
        pool = self.cluster.pool
        pool.heal()
        busy = self._busy()
        idle = [e for e in pool.info if e not in busy]
        states = self.cluster.client[idle].apply_async(inventory.tf_state).get(timeout=self.timeout) if idle else []
        stale = busy + [e for e, state in zip(idle, states) if state is not None]
        if stale:
            self.cluster.recycle(stale)

    # -- the plugin's calls -----------------------------------------------------------------
    def reclaim(self) -> None:
        """A notebook has ended (its kernel stopped): its engines are taken back, made fresh
        for the next one."""
        with self._lock:
            self._borrower, self._lent = None, set()
            if self.cluster is not None:
                self._refresh()

    def stop(self) -> None:
        """Stop the cluster (every process it started, waiting until they are gone) and
        stop answering."""
        from multiprocessing.connection import Client

        self._closing = True
        try:  # wakes the thread from accept()
            Client(self._address, authkey=self._key).close()
        except OSError:
            pass
        self._thread.join(10)
        self._listener.close()
        with self._lock:
            if self.cluster is not None:
                self.cluster.stop()
                self.cluster = None
        shutil.rmtree(self._dir, ignore_errors=True)
