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

import os
import re
import subprocess
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from workbench.common.figures import BATCH_GAP  # rows of one worker closer than this were published as one batch
from workbench.errors import TestbedError, invalid
from workbench.store import RunDir

if TYPE_CHECKING:
    import pandas as pd

_UNITS = {"bit": 1, "kbit": 10 ** 3, "mbit": 10 ** 6, "gbit": 10 ** 9}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)\s*$", re.IGNORECASE)
_MIN, _MAX = 10 ** 5, 100 * 10 ** 9  # 100 kbit .. 100 gbit
_EXPECTED = 'a rate such as "100mbit" or "1gbit" (units bit, kbit, mbit, gbit; 100kbit to 100gbit), or None for an unshaped link'
SAMPLE_EVERY = 0.1  # seconds between counter samples while a run trains
WRITE_EVERY = 1.0  # seconds between appends of the new samples to the run directory
WINDOW = 1.0  # seconds of traffic that bytes per step and utilisation average over
# tbf's smallest bucket: twice a GSO packet (64 KiB of payload plus its headers). A packet
# the bucket cannot hold never leaves: with 64 KiB, lowering 100 to 50 mbit under traffic
# left 213 packets stuck in the queue and the link dead for good (replace keeps the queue).
MIN_BURST = 128 * 1024

_beds = weakref.WeakSet()  # open test beds in this process
_watches = weakref.WeakSet()  # live LinkWatch objects (they record injected faults)


def parse_rate(value: str | None, argument: str = "link") -> int | None:
    """Bits per second from "100mbit" / "1gbit" / ...; None stays None (unshaped).

    >>> parse_rate("1.5gbit")
    1500000000
    """
    if value is None:
        return None
    m = _RATE.match(value) if isinstance(value, str) else None
    if m is None:
        raise invalid(argument, value, _EXPECTED)
    bits = int(round(float(m.group(1)) * _UNITS[m.group(2).lower()]))
    if not _MIN <= bits <= _MAX:
        raise invalid(argument, value, _EXPECTED)
    return bits


def parse_links(link: str | dict[str, str | None] | None, hosts: Sequence[str]) -> dict[str, int | None]:
    """{host: bits/s or None} from ``testbed(link=...)``: one rate for every host, or a
    dict naming some hosts (the others unshaped)."""
    if isinstance(link, dict):
        unknown = sorted(set(link) - set(hosts), key=str)
        if unknown:
            raise invalid("link", link, f"a dict whose keys are host names of this bed ({', '.join(hosts)})",
                          hint=f"Unknown: {', '.join(map(str, unknown))}.")
        return {h: parse_rate(link.get(h), f"link[{h!r}]") for h in hosts}
    rate = parse_rate(link)
    return dict.fromkeys(hosts, rate)


def format_rate(bits: int | None) -> str:
    if bits is None:
        return "unshaped"
    for unit, scale in (("gbit", 10 ** 9), ("mbit", 10 ** 6), ("kbit", 10 ** 3)):
        if bits >= scale:
            return f"{bits / scale:g}{unit}"
    return f"{bits}bit"


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


def watch(run: Any) -> LinkWatch | None:
    """A started ``LinkWatch`` if ``run``'s tasks live on the hosts of an open test bed."""
    addresses = {t.target.rsplit(":", 1)[0] for t in run.tasks if t.target}
    for bed in list(_beds):
        if bed.is_open and addresses & set(bed.hosts.values()):
            w = LinkWatch(bed, run, store=RunDir(run.run_dir))
            w.start()
            return w
    return None


def recorded(run_dir: str | os.PathLike, samples: LinkSamples | None = None) -> LinkSamples | None:
    """The link samples a run on a test bed wrote to ``run_dir`` (``LinkWatch``), or None
    for a run that has none. ``samples``: what an earlier call returned, to which only the
    samples written since are added."""
    samples = samples or LinkSamples()
    rows, samples.offset = RunDir(run_dir).read_links(samples.offset)
    with samples._lock:
        for row in rows:
            if row[1] not in samples._hosts:
                samples._hosts.append(row[1])
            samples._samples.append(tuple(row))
    return samples if samples.count else None


class LinkSamples:
    """Samples of a bed's links, (time, host, sent, received, rate) rows (bytes so far each
    way; the link's rate then, bits/s, None if unshaped), and what a run's views compute
    from them: ``join`` bytes per step and utilisation into its history, ``state`` and
    ``busiest`` each link's use. A live run's are taken by ``LinkWatch``; a recorded run's
    are read back from its run directory (``recorded``)."""

    def __init__(self) -> None:
        self.offset = 0  # bytes of the run directory's samples file read so far (``recorded``)
        self._hosts = []
        self._samples = []  # (time, host, sent, received, rate bits/s or None)
        self._lock = threading.Lock()

    @property
    def hosts(self) -> list[str]:
        """The hosts sampled, in the order first seen."""
        return self._hosts

    @property
    def count(self) -> int:
        """How many samples have been taken (a cache key: it grows with every sample)."""
        return len(self._samples)

    def frame(self, since: float | None = None) -> pd.DataFrame:
        """The samples: time, host, sent/received bytes since the first sample, rate. With
        ``since`` (``time.time()``) only the samples from then on (and the one before, per
        host), read from the end: a live dashboard's cost stays flat however long the run."""
        import pandas as pd

        with self._lock:
            if since is None:
                rows = list(self._samples)
            else:
                i = len(self._samples)
                while i > 0 and self._samples[i - 1][0] >= since:
                    i -= 1
                rows = self._samples[max(i - len(self.hosts), 0):]
        df = pd.DataFrame(rows, columns=["time", "host", "sent", "received", "rate"])
        for col in ("sent", "received"):
            df[col] = df[col] - df.groupby("host")[col].transform("first")
        return df

    def join(self, history: pd.DataFrame, window: float = WINDOW) -> pd.DataFrame:
        """``history`` with, per host H of the bed, ``link_tx_bytes_H`` / ``link_rx_bytes_H``
        (bytes H sent / received per step) and ``link_util_H`` (the busier direction's
        bits/s over the set rate; NaN where the link is unshaped), each averaged over at
        least the ``window`` seconds before the row (back to the worker's row before that): engines publish rows in batches, and a step's
        own few milliseconds are finer than the counters are sampled."""
        import numpy as np

        samples = self.frame()
        if history.empty or samples.empty:
            return history
        h = history.copy()
        since = np.empty(len(h))
        steps = np.empty(len(h))
        now = np.empty(len(h))
        for _, g in h.groupby("worker"):
            g = g.sort_values(["time", "step"])
            # rows of one batch (published together, microseconds apart) count as one: its end, its last step
            batch = (g["time"].diff() > BATCH_GAP).cumsum()
            t = g["time"].groupby(batch).transform("max").to_numpy(dtype=float)
            st = g["step"].groupby(batch).transform("max").to_numpy()
            before = np.searchsorted(t, t - window, side="right") - 1  # its last row >= window ago
            begin = t[0] - float(np.nan_to_num(g["step_time"].iloc[0]))  # the worker's first step began
            pos = h.index.get_indexer(g.index)
            now[pos] = t
            # from the worker's last row at least ``window`` old (or its first step's start):
            # bytes and steps over the same interval, however far apart batches arrive
            since[pos] = np.where(before >= 0, t[np.maximum(before, 0)], np.maximum(t - window, begin))
            steps[pos] = np.maximum(st - np.where(before >= 0, st[np.maximum(before, 0)], g["step"].iloc[0] - 1), 1)
        span = np.maximum(now - since, 1e-6)
        for host, s in samples.groupby("host"):
            t = s["time"].to_numpy()
            moved = {}
            for col, name in (("sent", "tx"), ("received", "rx")):
                v = s[col].to_numpy(dtype=float)
                moved[name] = np.interp(now, t, v) - np.interp(since, t, v)
                h[f"link_{name}_bytes_{host}"] = moved[name] / steps
            rate = np.interp(now, t, s["rate"].astype(float).to_numpy())
            h[f"link_util_{host}"] = np.maximum(moved["tx"], moved["rx"]) * 8 / span / rate
        return h

    def state(self, window: float = 2.0, since: float | None = None) -> dict[str, dict[str, Any]]:
        """{host: {"rate": bits/s or None, "bytes_per_s": the busier direction's bytes/s,
        "util": bytes_per_s over the rate, None if unshaped}} over the last ``window``
        seconds of samples, or from time ``since`` (``time.time()``) on; hosts with fewer
        than two samples in it are left out."""
        with self._lock:
            last = self._samples[-1][0] if self._samples else None
        if last is None:
            return {}
        samples = self.frame(since=last - window if since is None else since)
        out = {}
        for host, s in samples.groupby("host", sort=False):
            first = s["time"].iloc[-1] - window if since is None else since
            recent = s[s["time"] >= first]
            dt = recent["time"].iloc[-1] - recent["time"].iloc[0] if len(recent) >= 2 else 0
            if dt <= 0:
                continue
            moved = max(recent["sent"].iloc[-1] - recent["sent"].iloc[0],
                        recent["received"].iloc[-1] - recent["received"].iloc[0]) / dt
            bits = recent["rate"].iloc[-1]
            bits = None if bits is None or bits != bits else int(bits)
            out[host] = {"rate": bits, "bytes_per_s": float(moved), "util": None if bits is None else moved * 8 / bits}
        return out

    def busiest(self, window: float = 2.0) -> tuple[str, float | None, float] | None:
        """(host, utilisation or None, bytes/s) of the link that moved most in the last
        ``window`` seconds, or None before two samples."""
        return busiest(self.state(window))


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
        with self._lock:
            self._samples.extend(rows)

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


def busiest(state: dict[str, dict[str, Any]]) -> tuple[str, float | None, float] | None:
    """(host, utilisation or None, bytes/s) of the link of ``state`` (``LinkWatch.state``)
    that moved the most bytes, or None if it is empty."""
    if not state:
        return None
    host = max(state, key=lambda h: state[h]["bytes_per_s"])
    return host, state[host]["util"], state[host]["bytes_per_s"]
