"""The bottleneck a prediction names (``costmodel.predict``'s "bottleneck" and "why"): the
part that bounds a step, in one sentence with its numbers."""

from __future__ import annotations

from typing import Any

from workbench.common import costmodel
from workbench.common.costmodel import Scenario


def named(s: Scenario, p: dict[str, Any], fixed: float) -> tuple[str, str]:
    """The part that bounds the step, and one sentence saying why, with its numbers:
    the network when a step spends at least as long on links as outside them (``fixed``:
    input, compute and other), else compute or the overhead around it."""
    rate = p["steps_per_s"]
    compute, cpu_wait = costmodel.compute_time(s)
    cores = (f" (its {s.workers} workers share {s.cores} cores: compute x{compute / (compute - cpu_wait):.2f} "
             "of one alone)") if cpu_wait > 0 else ""
    moved = {h: max(b.values()) for h, b in p["bytes_per_step"].items()}
    latency = p["latency_time"]
    if p["link_time"] >= fixed and latency >= p["link_time"] - latency:
        messages = round(latency / max((costmodel.path_link(s, h).alpha for h in costmodel.paths(s)), default=1.0))
        return "latency", (f"latency-bound: {messages} messages per step at {latency / max(messages, 1) * 1e3:.3g} ms "
                           f"each ({latency * 1e3:.3g} ms) outweigh moving their bytes "
                           f"({(p['link_time'] - latency) * 1e3:.3g} ms); predicted {rate:.3g} steps/s")
    if moved and p["link_time"] >= fixed:
        host = max(moved, key=lambda h: moved[h] / s.links[h].payload_rate())
        link = s.links[host]
        speed = f"{link.rate / 1e6:g} Mbit/s" if link.rate else f"{link.payload_rate() * 8 / 1e6:,.0f} Mbit/s (unshaped)"
        return (f"network: {host}",
                f"network-bound: {host}'s link carries {moved[host] / 1e6:.3g} MB per step at {speed}; "
                f"predicted {rate:.3g} steps/s")
    if p["link_time"] >= fixed:  # messages between tasks of one host, over its loopback
        per_ring = costmodel.GATHERS_8BIT * (s.workers - 1) if s.bits == 8 else 2 * (s.workers - 1) * s.packs
        messages = per_ring if costmodel.ring(s.strategy) else 2 * len(s.cuts) if s.cuts else 2
        return "communication", (f"communication-bound: {p['link_time'] * 1e3:.3g} ms per step in {messages} "
                                 f"messages between the tasks over this machine's loopback "
                                 f"({s.loopback.alpha * 1e3:.3g} ms each before its bytes), against "
                                 f"{compute * 1e3:.3g} ms of compute; predicted {rate:.3g} steps/s")
    if compute >= s.input + s.other:
        return "compute", (f"compute-bound: {compute * 1e3:.3g} ms of compute per step{cores} against "
                           f"{p['link_time'] * 1e3:.3g} ms on links; predicted {rate:.3g} steps/s")
    return "overhead", (f"overhead-bound: {(s.input + s.other) * 1e3:.3g} ms per step outside compute and "
                        f"communication (input, Python, dispatch) against {compute * 1e3:.3g} ms of compute; "
                        f"predicted {rate:.3g} steps/s")
