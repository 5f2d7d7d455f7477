"""Samples of a test bed's links and what a run's views compute from them: bytes per step and
utilisation joined into a run's history, each link's use. Pure (pandas and numpy): a live
run's samples are taken by the bed's ``LinkWatch`` (``kernel/testbed/links.py``), a
recorded run's are read back from its run directory (``links.jsonl``)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from workbench.common.figures import BATCH_GAP  # rows of one worker closer than this were published as one batch
from workbench.common.figures import steady_stretch
from workbench.common.rates import busiest

if TYPE_CHECKING:
    import pandas as pd

WINDOW = 1.0  # seconds of traffic that bytes per step and utilisation average over


class LinkSamples:
    """Samples of a bed's links, (time, host, sent, received, rate) rows (bytes so far each
    way; the link's rate then, bits/s, None if unshaped), and what a run's views compute
    from them: ``join`` bytes per step and utilisation into its history, ``state`` and
    ``busiest`` each link's use. A live run's are taken by ``LinkWatch``; a recorded run's
    are read back from its run directory (``runs/recorded.py``)."""

    def __init__(self) -> None:
        self.offset = 0  # bytes of the run directory's samples file read so far (``runs/recorded.py``)
        self._hosts = []
        self._samples = []  # (time, host, sent, received, rate bits/s or None)
        self._lock = threading.Lock()

    def add(self, rows: list) -> None:
        """Take (time, host, sent, received, rate) rows, in time order."""
        with self._lock:
            for row in rows:
                if row[1] not in self._hosts:
                    self._hosts.append(row[1])
                self._samples.append(tuple(row))

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

    def over_stretch(self, history: pd.DataFrame, first_step: int = 1,
                     stretch: tuple | None = None) -> dict[str, dict[str, float]]:
        """{host: {"tx", "rx": bytes its link's counters moved per step}} over the stretch
        ``history``'s steps/s counts (``figures.steady_stretch``): the bytes from the end of
        its first step to the end of its last, over the steps between. Asynchronous steps
        are numbered as the chief collects them, not as they ran: a host's bytes averaged
        row by row over a fast run's few 10-step calls read 0.72-1.25 of these. Hosts whose
        samples do not cover the stretch (a live run's newest steps) are left out. ``stretch``:
        ``steady_stretch``'s, when the caller has it."""
        import numpy as np

        first, began, last, ended = steady_stretch(history, first_step) if stretch is None else stretch
        if history.empty or not (last > first and ended > began):
            return {}
        out = {}
        for host, s in self.frame().groupby("host"):
            t = s["time"].to_numpy(dtype=float)
            if t[0] > began or t[-1] < ended:
                continue
            moved = {way: float(np.diff(np.interp([began, ended], t, s[col].to_numpy(dtype=float)))[0])
                     for col, way in (("sent", "tx"), ("received", "rx"))}
            out[host] = {way: b / (last - first) for way, b in moved.items()}
        return out

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
