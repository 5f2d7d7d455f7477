"""Link rates as the workbench reads and writes them ("100mbit", "1gbit"), and the busiest
link of a sampled state: pure functions, used by the test bed (``kernel/testbed``), its
views and the cost model."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from workbench.errors import invalid

_UNITS = {"bit": 1, "kbit": 10 ** 3, "mbit": 10 ** 6, "gbit": 10 ** 9}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)\s*$", re.IGNORECASE)
_MIN, _MAX = 10 ** 5, 100 * 10 ** 9  # 100 kbit .. 100 gbit
_EXPECTED = 'a rate such as "100mbit" or "1gbit" (units bit, kbit, mbit, gbit; 100kbit to 100gbit), or None for an unshaped link'


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


def busiest(state: dict[str, dict[str, Any]]) -> tuple[str, float | None, float] | None:
    """(host, utilisation or None, bytes/s) of the link of ``state`` (``LinkWatch.state``)
    that moved the most bytes, or None if it is empty."""
    if not state:
        return None
    host = max(state, key=lambda h: state[h]["bytes_per_s"])
    return host, state[host]["util"], state[host]["bytes_per_s"]

