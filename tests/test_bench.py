"""The benchmarks keep working (tiny runs); their numbers are not asserted: these machines are noisy."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import versus_peer  # noqa: E402  (bench/: its results' keys)


def strategies_ok(data):
    for rows in data["results"].values():
        assert rows["single"]["vs_single"] == 1.0
        assert all(r["steps_per_s_median"] > 0 for r in rows.values() if isinstance(r, dict))


def versus_peer_ok(data):
    r = data["results"]
    assert all(s["median"] > 0 for s in r["start"].values())
    for row in r["digits"].values():
        assert row["ratio"]["median"] > 0 and set(row["engine RSS after training (MB)"]) >= {"worker:0", "worker:1"}
    # --quick runs no looped peer (versus_peer.py: two process launches less)
    assert not any("peer with 10 steps per schedule (tf.range) / peer" in row for row in r["digits"].values())
    mwms = [row for label, row in r["digits"].items() if label.startswith("MWMS")]
    bursts = mwms[0][versus_peer.BEST_BURSTS]
    assert bursts["pairs"] == 2 and bursts["ratio"]["n"] == 2 and bursts["ratio"]["min"] > 0


def dashboard_ok(data):
    assert data["latency_samples"] > 0 and data["logs_ratio"]["median"] > 0


def simulated_scale_ok(data):
    sim = data["results"]["simulated"]
    assert sim and all(r["rows_merged"] > 0 and r["dashboard_updates"] > 0 for r in sim)
    assert data["results"]["state_api"]["runs_listed"] > 0
    w = data["results"]["window_cost"]
    assert w["new"]["rows"] < w["old"]["rows"]


def scale_ok(data):
    rows = data["results"]["rows"]
    assert [r["engines"] for r in rows] == [2]
    assert all(rows[0][k] > 0 for k in ("ready_s", "first_step_s", "rerun_first_step_s", "stop_s", "engine_pss_mb"))
    start = data["results"]["cold_start"]  # one zygote / import pair
    assert sorted((r["zygote"], r["forked"]) for r in start["rows"]) == [(False, False), (True, True)]
    assert all(m["ratio"] > 0 for m in start["median"].values())


def network_ok(data):
    rows = data["results"]
    assert set(rows) == {"unshaped", "1 Gbit", "100 Mbit"}
    assert all(r["steps_per_s_median"] > 0 and r["bytes_sent_per_step"] > 0 for r in rows.values())


def anatomy_ok(data):
    assert data["steps_per_s_anatomy_on"] and data["steps_per_s_anatomy_off"] and data["overhead_ratio_median"] > 0
    sent = data["bytes_sent_per_step"]
    assert set(sent) == {"None", "fp16", "bf16", "int8"} and sent["fp16"] < sent["None"] and sent["int8"] < sent["fp16"]


def packing_ok(data):
    assert len(data["alpha_s"]) == len(data["packs_ratio"]) == len(data["ring_ratio"]) == data["meta"]["repeats"]
    assert data["packs_ratio_median"] > 0 and data["ring_ratio_median"] > 0
    assert all(c["path"] == "loopback" and c["alpha_s"] > 0 for c in data["calibrations"])


def ceilings_ok(data):
    c, a = data["results"]["compute"], data["results"]["all-reduce"]
    assert c["FLOPs per step"] > 0 and c["workbench / matmul"]["median"] > 0 and c["plain TF loop / matmul"]["median"] > 0
    assert a["per-variable / packed"]["median"] > 0 and a["loopback TCP MB/s"]["median"] > 0


def test_versus_peer_prints_no_ratio_of_a_run_too_short_to_measure(tmp_path):
    """Issue 35.7: ``versus_peer.py --quick`` printed x46.12 for PSS (10,090 vs 219 steps/s),
    timing a 40-step parameter-server run between two ends of rows its chief collected
    together. It times runs as the dashboard and the CLI do (``common/figures.py``): such
    a run is too short to measure, and its row says so instead of a ratio."""
    import math

    from checks import recorded_run
    from workbench.kernel.runs.recorded import RecordedRun

    chunks = [(1, 1, 0.0), (2, 11, 0.2104), (12, 21, 0.2107), (22, 31, 0.2111), (32, 40, 0.2149)]
    rows = [{"step": s, "worker": f"worker:{s % 2}", "loss": 1.0, "accuracy": 0.5, "step_time": 0.01,
             "examples_per_s": 12800.0, "replicas": 1, "time": 1000.0 + t + 1e-5 * (s - a)}
            for a, b, t in chunks for s in range(a, b + 1)]
    run = RecordedRun(recorded_run(tmp_path, rows, {"final_step": 40}, strategy="parameter_server", ps=1, steps=40,
                                   global_batch_size=128))
    assert math.isnan(versus_peer.steady(run))
    row = versus_peer.summary([versus_peer.steady(run) / 219.0])
    assert versus_peer.ratio_text(row) == "too short to measure"
    assert versus_peer.ratio_text(versus_peer.summary([0.99, 1.01])) == "x1.00 [0.99-1.01]"


@pytest.mark.cluster
def test_every_benchmark_runs_in_quick_mode_with_plots():
    """The README's one benchmark command, in its tiny mode. It leaves no temporary directory."""
    temp = set(Path(tempfile.gettempdir()).glob("wb-sim-*"))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "--quick"],
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-3000:]
    results = ROOT / "bench" / "results"
    summary = json.loads((results / "run_all.json").read_text())
    checks = {"strategies": strategies_ok, "dashboard": dashboard_ok, "versus_peer": versus_peer_ok,
              "ceilings": ceilings_ok, "network": network_ok, "anatomy": anatomy_ok, "packing": packing_ok,
              "simulated_scale": simulated_scale_ok, "scale": scale_ok}
    assert summary["quick"] is True and set(summary["seconds"]) == set(checks)
    for name, check in checks.items():
        data = json.loads((results / f"{name}.json").read_text())
        assert data["meta"]["quick"] is True
        check(data)
    for png in summary["plots"]:
        assert (results / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## ceilings" in (results / "summary.md").read_text()
    assert set(Path(tempfile.gettempdir()).glob("wb-sim-*")) == temp
