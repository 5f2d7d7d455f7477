"""The system commands the test bed runs (``ip``, ``tc``, daemons' logs), failing with a
``TestbedError`` that quotes the command and its error: shared by ``testbed`` and
``slurm_bed``."""

import subprocess

from workbench.errors import TestbedError


def run(cmd: list[str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise TestbedError(f"`{' '.join(cmd)}` failed ({out.returncode}): {out.stderr.strip()}")


def ip(*args: str) -> None:
    run(["ip", *args])


def tail(path: str, lines: int = 10) -> str:
    """The last ``lines`` lines of a log file ("" if it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])
    except OSError:
        return ""
