"""``Borrowed``: the engines a notebook's ``wb.Cluster(...)`` borrows from the cluster that a
test session shares between its notebooks (the pytest plugin's ``Lender``,
``testing/lender.py``), in place of the processes it would start itself (``Launched``).

The lender's process started the controller and the engines and keeps them: the kernel
that nbval runs a notebook in, a child of that process, finds the offer in its environment
(``offered``), asks for as many fresh engines as the notebook's cluster wants, and asks the
lender again whenever its pool recycles engines (a new topology, a failure) or the cluster
stops. The cluster looks and behaves as a local one started by the notebook: only where
its processes come from differs.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterable
from typing import Any

from workbench.errors import ClusterError
from workbench.kernel.launchers.launched import Launched

ENV = "WORKBENCH_SUITE_CLUSTER"


class Refused(ClusterError):
    """The session's cluster is lent to another cluster of this kernel: this one starts its own."""


def offered() -> dict | None:
    """The session's cluster offered to this process (``ENV``: the lender's address, key
    and PID), or None. Only the lender's own children take it: the notebooks' kernels, not
    the processes those kernels start in turn (a notebook that runs a second Python, say),
    which inherit the environment but want clusters of their own."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    offer = json.loads(raw)
    return offer if offer.get("lender") == os.getppid() else None


def processes(offer: dict | None, n: int, launcher: str, controller: str, hosts: dict[str, int] | None,
              ipp_options: dict, timeout: float) -> "Borrowed | Launched":
    """Where a cluster's processes come from: engines of a test session's shared cluster
    offered to this kernel (``offer``; plain local clusters only), else its own."""
    plain = launcher == "local" and controller == "local" and hosts is None and not ipp_options
    if offer is not None and plain:
        return Borrowed(offer, n, timeout)
    return Launched(n, launcher, controller, hosts, ipp_options, timeout)


class Borrowed:
    """``n`` engines borrowed from a session's cluster (``offer``: from ``offered``): the
    calls ``Cluster`` makes of ``Launched``, answered by the lender that owns the processes."""

    def __init__(self, offer: dict, n: int, timeout: float) -> None:
        self.offer = offer
        self.n = n
        self.timeout = timeout
        self.borrower = (os.getpid(), secrets.token_hex(4))  # this cluster, to the lender
        self.cluster_id: str | None = None  # once lent
        self.controller_pid: int | None = None
        self.started_by_zygote = False
        self.engine_ids: list[int] = []  # the engines lent to this cluster at its start
        self.others: list[int] = []  # the controller's other engines, not this cluster's

    def _ask(self, *request: Any) -> Any:
        """One request to the lender; its answer, or a ``ClusterError`` saying what failed."""
        from multiprocessing.connection import Client

        try:
            with Client(self.offer["address"], authkey=bytes.fromhex(self.offer["authkey"])) as conn:
                conn.send(request)
                if not conn.poll(4 * self.timeout):  # it may start or grow the cluster first
                    raise TimeoutError(f"no answer within {4 * self.timeout:.0f} s")
                reply = conn.recv()
        except (OSError, EOFError, TimeoutError) as e:
            raise ClusterError(f"The test session's shared cluster (the workbench pytest plugin's) did not answer "
                               f"{request[0]!r}: {e}. Run pytest with --wb-no-shared-cluster to start one per notebook.") from e
        if "error" in reply:
            raise ClusterError(f"The test session's shared cluster could not {request[0]} engines: {reply['error']}")
        return reply["ok"]

    def start(self, ipp: Any, heartbeat: list[str]) -> Any:
        """Borrow ``n`` fresh engines; returns a client of the session's controller, once
        they are registered with it. Raises ``Refused`` when the lender lends to another
        cluster of this kernel. (``heartbeat``: the lender's controller has its own.)"""
        lent = self._ask("lend", self.borrower, self.n)
        if lent is None:
            raise Refused("the session's cluster is lent to another cluster of this kernel")
        self.cluster_id, self.controller_pid = lent["cluster_id"], lent["controller_pid"]
        self.started_by_zygote = lent["zygote"]
        self.engine_ids, self.others = lent["engines"], lent["others"]
        client = ipp.Client(lent["connection_file"])
        deadline = time.monotonic() + self.timeout
        while not set(self.engine_ids) <= set(client.ids):
            if time.monotonic() > deadline:
                client.close()
                raise ClusterError(f"engines {self.engine_ids} of the session's cluster are not registered with its "
                                   f"controller after {self.timeout:.0f} s (registered: {client.ids})")
            time.sleep(0.05)
        return client

    def not_lent(self, registered: Iterable[int]) -> list[int]:
        """Engines of the controller that are not this cluster's: the lender's others, and
        those it has just replaced, which the controller lists until their heartbeat lapses
        (asking them for an inventory failed: "Engine 0 died while running task")."""
        return sorted((set(registered) | set(self.others)) - set(self.engine_ids))

    def is_local(self, pid: int) -> bool:
        """The session's engines are local processes: this kernel may end one by its PID,
        as it would its own (the lender replaces it when asked)."""
        return True

    def restart(self, old: list, client: Any, runs: Iterable[Any], engines: list) -> None:
        """The lender ends engines ``old`` (EngineInfo) and starts as many new ones, which
        register with the controller before it answers."""
        self._ask("recycle", self.borrower, [o.id for o in old])

    def keep_standby(self, taken: set[int]) -> None:
        """A spare engine is the lender's business (it forks engines from a zygote)."""

    def engine_output(self, engine_id: int, lines: int = 12) -> str:
        return self._ask("output", engine_id, lines) if self.cluster_id is not None else ""

    def log_tail(self, lines: int = 20) -> str:
        return ""

    def stop(self, tmps: Iterable[str] = ()) -> None:
        """Give the engines back: the lender ends the runs still training on them now, and
        replaces the engines that hold TensorFlow state before it lends them again."""
        if self.cluster_id is not None:
            self._ask("release", self.borrower)
            self.cluster_id = None
