"""The benchmarks keep working (tiny runs); their numbers are not asserted: these machines are noisy."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def strategies_ok(data):
    for rows in data["results"].values():
        assert rows["single"]["vs_single"] == 1.0
        assert all(r["steps_per_s_median"] > 0 for r in rows.values() if isinstance(r, dict))


def versus_peer_ok(data):
    r = data["results"]
    assert all(s["median"] > 0 for s in r["start"].values())
    for row in r["digits"].values():
        assert row["ratio"]["median"] > 0 and set(row["engine RSS after training (MB)"]) >= {"worker:0", "worker:1"}


def dashboard_ok(data):
    assert data["latency_samples"] > 0


@pytest.mark.cluster
@pytest.mark.parametrize("name,check", [("strategies", strategies_ok), ("dashboard", dashboard_ok),
                                        ("versus_peer", versus_peer_ok)])
def test_benchmark_runs_in_quick_mode(name, check):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), "--quick"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text())
    assert data["meta"]["quick"] is True
    check(data)
