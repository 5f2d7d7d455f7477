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
FRAME = 1514  # bytes tbf charges for a full Ethernet frame (MTU 1500 + 14): its largest packet
SLACK = 500e-6  # seconds of traffic the bucket holds beyond one frame: the timer's lateness (shape())
QUEUE = 0.02  # seconds of traffic a link's queue holds before it drops (tbf's limit)...
QUEUE_FLOOR = 262144  # ...and at least 256 KiB, whatever the rate (shape())

_beds = weakref.WeakSet()  # open test beds in this process
_watches = weakref.WeakSet()  # live LinkWatch objects (they record injected faults)


def shape(veth: str, netns: str, bits: int | None) -> None:
    """Set both directions of one host's link to ``bits``/s (None: remove the shaping).

    The token bucket is what a sender gets at line speed after an idle link, so it is kept
    small: one frame plus ``SLACK`` of traffic (2.8 KB at 20 Mbit, 7.8 KB at 100 Mbit,
    64 KB at 1 Gbit). It was ``max(128 KiB, 10 ms)``: a 100 KB message crossed a 20 Mbit
    link in 1% of S/rate, 1 MB a 1 Gbit link in 13-19% (bench/links.py). The slack is the
    price of tbf's timer, which fires late on 2 loaded cores: with a bucket of exactly one
    frame a 100 Mbit link carried 0.7 of its rate, a 20 Mbit one 0.94; with 100 us of
    slack a TCP stream still fell to 0.92-0.95 of 100 Mbit, with 500 us it held 0.955-0.957
    (the payload's ceiling with 1,514-byte frames: 1448/1514 = 0.956). So what stays
    unemulated is one frame plus 500 us of traffic per message (and the last frame's own
    serialization, which tbf never delays): small messages at high rates cross too fast.

    ``peakrate`` with ``mtu`` = one frame caps tbf's largest packet at one frame whatever
    the bucket: tbf cuts each offloaded (GSO) packet of up to 64 KiB into frames as it
    queues it, so a bucket smaller than a GSO packet neither drops nor strands it. Before,
    the bucket had to hold a whole GSO packet, and a rate lowered under traffic left
    queued packets bigger than the new bucket, stuck for good (213 packets with a 64 KiB
    bucket). The peak rate (1000 x the rate) never binds: at 10 x, the one-frame peak
    bucket made tbf wait for its timer after every frame (1 Gbit carried 0.4 of its rate).

    The queue holds ``QUEUE`` of traffic but never less than 256 KiB (``QUEUE_FLOOR``: it
    binds below 105 Mbit). At 10 Mbit 20 ms is 25 KB, less than one of the 64 KiB packets
    TCP hands the link (GSO), and the host's own TCP lost frames of nearly every large packet
    it queued, where a real NIC's queue holds them and stalls the sender. Measured: one
    2 MB stream out of a 10 Mbit host lost 288 frames with 25 KB, 51 with 128 KiB, none
    with 256 KiB, at the same 9.57 Mbit/s; 3 parameter-server workers at 10 Mbit (120
    steps) lost 6,750 frames at the PS's egress, and the resends made the workers' links
    carry 1.18-1.29x the bytes of the same run with a deeper queue; steps/s did not move
    (5.51 and 5.43).
    """
    for prefix, dev in ((["tc"], veth), (["tc", "-n", netns], "eth0")):
        if bits is None:
            out = subprocess.run([*prefix, "qdisc", "del", "dev", dev, "root"], capture_output=True, text=True)
            if out.returncode != 0 and "No such file" not in out.stderr and "Cannot delete qdisc with handle of zero" not in out.stderr:
                raise TestbedError(f"`{' '.join(prefix)} qdisc del dev {dev} root` failed: {out.stderr.strip()}")
            continue
        # the queue holds 20 ms (enough for one TCP stream to fill the rate, little added
        # delay), and at least 256 KiB: what the host's own TCP queues at once (see above)
        cmd = [*prefix, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bits}bit",
               "burst", str(FRAME + int(bits / 8 * SLACK)), "limit", str(max(int(bits / 8 * QUEUE), QUEUE_FLOOR)),
               "peakrate", f"{1000 * bits}bit", "mtu", str(FRAME)]  # see the docstring
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
