"""The test bed's links: a set bandwidth per host, bytes counted per link, faults injected.

Each emulated host (``wb.testbed``) has one link: a veth pair between its namespace's
``eth0`` and the bridge. A rate shapes both directions with ``tbf`` (a token bucket):
the egress of the host-side veth shapes what flows *into* the host, the egress of the
namespace's ``eth0`` what flows *out of* it. This kernel has no ``netem``: latency,
jitter and random loss are **not** emulated, only bandwidth (and links taken down).

Bytes per link come from the kernel's interface counters, read in the root namespace on
the host-side veth (``/sys/class/net/<veth>/statistics/{tx,rx}_bytes``): its ``rx`` is
what the host sent, its ``tx`` what the host received. A run whose tasks live on a bed's
hosts samples them in a small thread (``LinkWatch``), each sample with the link's rate at
that moment, and joins them into ``run.history``. The samples go to the run directory as
they are taken (``links.jsonl``): ``wb.load`` reads them back (``recorded``), so a run
keeps its links, and the rates it saw, after its kernel and its bed are gone.
"""

from __future__ import annotations

import subprocess
import threading
import time
import weakref
from typing import Any

from workbench.common.linksamples import WINDOW, LinkSamples  # noqa: F401 (the bed's names)
from workbench.common.rates import busiest, format_rate, parse_links, parse_rate  # noqa: F401 (the bed's names)
from workbench.errors import TestbedError
from workbench.store import RunDir

SAMPLE_EVERY = 0.1  # seconds between counter samples while a run trains
WRITE_EVERY = 1.0  # seconds between appends of the new samples to the run directory
# tbf's smallest bucket: twice a GSO packet (64 KiB of payload plus its headers). A packet
# the bucket cannot hold never leaves: with 64 KiB, lowering 100 to 50 mbit under traffic
# left 213 packets stuck in the queue and the link dead for good (replace keeps the queue).
MIN_BURST = 128 * 1024

_beds = weakref.WeakSet()  # open test beds in this process
_watches = weakref.WeakSet()  # live LinkWatch objects (they record injected faults)


def shape(veth: str, netns: str, bits: int | None) -> None:
    """Set both directions of one host's link to ``bits``/s (None: remove the shaping)."""
    for prefix, dev in ((["tc"], veth), (["tc", "-n", netns], "eth0")):
        if bits is None:
            out = subprocess.run([*prefix, "qdisc", "del", "dev", dev, "root"], capture_output=True, text=True)
            if out.returncode != 0 and "No such file" not in out.stderr and "Cannot delete qdisc with handle of zero" not in out.stderr:
                raise TestbedError(f"`{' '.join(prefix)} qdisc del dev {dev} root` failed: {out.stderr.strip()}")
            continue
        # the bucket holds 10 ms of traffic, at least MIN_BURST; the queue 20 ms: enough for
        # one TCP stream to fill the rate, little added delay
        burst = max(MIN_BURST, bits // 8 // 100)
        cmd = [*prefix, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bits}bit",
               "burst", str(burst), "latency", "20ms"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise TestbedError(f"`{' '.join(cmd)}` failed ({out.returncode}): {out.stderr.strip()}")


def set_state(veth: str, netns: str, up: bool) -> None:
    """Take a host's link down (both ends: nothing crosses) or bring it back up."""
    state = "up" if up else "down"
    for cmd in (["ip", "link", "set", veth, state], ["ip", "-n", netns, "link", "set", "eth0", state]):
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise TestbedError(f"`{' '.join(cmd)}` failed ({out.returncode}): {out.stderr.strip()}")


def counters(veth: str) -> tuple[int, int]:
    """(bytes the host sent, bytes it received) so far, from the host-side veth."""
    base = f"/sys/class/net/{veth}/statistics/"
    with open(base + "rx_bytes") as f:
        sent = int(f.read())
    with open(base + "tx_bytes") as f:
        received = int(f.read())
    return sent, received


def record_fault(bed: Any, fault: str, host: str, **info: Any) -> None:
    """Note an injected fault in the events of every live run on ``bed``'s hosts."""
    for watch in list(_watches):
        if watch.bed is bed:
            watch.note(fault, host, **info)


def track(bed: Any) -> None:
    """Sample the links of every run that starts on ``bed``'s hosts from now on (the runs'
    room calls ``watch`` for each new live run: ``runs.handle.observe``)."""
    from workbench.kernel.runs import handle

    _beds.add(bed)
    handle.observe(watch)


def watch(run: Any) -> LinkWatch | None:
    """A started ``LinkWatch`` if ``run``'s tasks live on the hosts of an open test bed."""
    addresses = {t.target.rsplit(":", 1)[0] for t in run.tasks if t.target}
    for bed in list(_beds):
        if bed.is_open and addresses & set(bed.hosts.values()):
            w = LinkWatch(bed, run, store=RunDir(run.run_dir))
            w.start()
            return w
    return None






class LinkWatch(LinkSamples):
    """Samples every link of ``bed`` until ``run`` is done, appending them to ``store``'s
    samples file (a ``RunDir``) as it goes, and notes the faults injected on the bed in the
    run's events."""

    def __init__(self, bed: Any, run: Any, every: float = SAMPLE_EVERY, store: RunDir | None = None) -> None:
        super().__init__()
        self.bed = bed
        self._run = weakref.ref(run)
        self._every = every
        self._store = store
        self._written = (0, 0.0)  # (samples written to the store, when)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"workbench-links-{run.id}", daemon=True)
        _watches.add(self)

    @property
    def hosts(self) -> list[str]:
        """The bed's hosts."""
        return list(self.bed.hosts)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)
        _watches.discard(self)
        self.write()

    def write(self) -> None:
        """Append the samples taken since the last write to the run directory (if any)."""
        if self._store is None:
            return
        with self._lock:
            done = self._written[0]
            new = self._samples[done:]
            self._written = (done + len(new), time.monotonic())
        try:
            self._store.append_links(new)
        except OSError:  # a full or vanished disk: the live run keeps its samples
            pass

    def sample(self) -> None:
        now = time.time()
        rows = []
        for host in self.bed.hosts:
            try:
                sent, received = counters(self.bed.veth(host))
            except (OSError, ValueError, KeyError):  # the bed is gone
                continue
            rows.append((now, host, sent, received, self.bed.links.get(host)))
        self.add(rows)

    def note(self, fault: str, host: str, **info: Any) -> None:
        run = self._run()
        if run is not None and not run.done:
            run.note("injected", fault=fault, host=host, step=run.step, **info)

    def _loop(self):
        while not self._stop.wait(self._every):
            run = self._run()
            if run is None or not self.bed.is_open:
                break
            self.sample()
            if time.monotonic() - self._written[1] >= WRITE_EVERY:
                self.write()
            if run.done:
                break
        _watches.discard(self)
