"""The benchmark keeps working (a tiny run); its numbers are not asserted: these machines are noisy."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.cluster
def test_strategy_benchmark_runs_in_quick_mode():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "strategies.py"), "--quick"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((ROOT / "bench" / "results" / "strategies.json").read_text())
    assert data["meta"]["quick"] is True
    for rows in data["results"].values():
        assert rows["single"]["vs_single"] == 1.0
        assert all(r["steps_per_s_median"] > 0 for r in rows.values() if isinstance(r, dict))


@pytest.mark.cluster
def test_dashboard_benchmark_runs_in_quick_mode():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "dashboard.py"), "--quick"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((ROOT / "bench" / "results" / "dashboard.json").read_text())
    assert data["meta"]["quick"] is True and data["latency_samples"] > 0
