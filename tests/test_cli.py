"""The headless CLI: same runs as the notebook, a progress bar, a summary, clear errors."""

import os
import re
import subprocess
import sys

import pytest


def run_cli(tmp_path, *args):
    env = dict(os.environ, WORKBENCH_HOME=str(tmp_path / "home"))
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.cluster
def test_cli_trains_headless_and_prints_a_summary(tmp_path):
    out = run_cli(tmp_path, "train", "--strategy", "multi_worker_mirrored", "--workers", "2",
                  "--steps", "40", "--global-batch-size", "64")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "steps          40/40" in out.stdout
    assert "test accuracy" in out.stdout and "worker:1" in out.stdout
    # progress from the first line: the cluster starting, engines ready, the first step, the bar
    lines = out.stdout.splitlines()
    assert lines[0].startswith("starting a local cluster: a controller and 2 engines"), lines[:3]
    assert lines[1].startswith("2 engines ready in ") and "first step after" in out.stdout
    assert "40/40" in out.stdout.split("steps          ")[0]  # the progress bar reached the end
    summary = out.stdout.split("steps          40/40")[1]
    for figure in ("steps/s", "examples/s", "wall time"):
        assert f"  {figure}" in summary, summary
    # the bar ends on the summary's steps/s, not on tqdm's own count of its updates
    bar_rate = re.findall(r"40/40 \[[^\]]*?([\d,.]+) steps/s \(whole run\)", out.stdout)
    summary_rate = re.search(r"  steps/s +([\d,.]+) ", summary)
    assert bar_rate and summary_rate, out.stdout[-2000:]
    assert bar_rate[-1] == summary_rate.group(1), (bar_rate, summary_rate.group(1))
    assert "step/s" not in out.stdout, out.stdout[-2000:]  # tqdm's own rate is not shown


def test_cli_refuses_bad_arguments_before_starting_a_cluster(tmp_path):
    out = run_cli(tmp_path, "train", "--strategy", "paramserver")
    assert out.returncode == 2
    assert "Invalid value for argument '--strategy'. Received: --strategy='paramserver'" in out.stderr
    assert "Did you mean 'parameter_server'" in out.stderr
    assert not (tmp_path / "home" / "ipython").exists(), "a cluster was started for a bad argument"
    out = run_cli(tmp_path, "train", "--ps", "1")  # the API's 'ps' is the option the user typed
    assert out.returncode == 2 and "argument '--ps'. Received: --ps=1. Expected 0" in out.stderr, out.stderr


def test_cli_help_is_plain_text():
    out = subprocess.run([sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "``" not in out.stdout and "'python -m workbench train ...'" in out.stdout


@pytest.mark.cluster
def test_cli_lists_shows_and_resumes_a_run_with_another_number_of_workers(tmp_path):
    out = run_cli(tmp_path, "train", "--strategy", "multi_worker_mirrored", "--workers", "2", "--steps", "40",
                  "--global-batch-size", "64", "--checkpoint-every", "20", "--no-progress")
    assert out.returncode == 0, out.stderr[-3000:]
    run_id = re.search(r"^run (\S+): ", out.stdout, re.M).group(1)  # the summary's first line
    listed = run_cli(tmp_path, "runs")
    assert listed.returncode == 0 and run_id in listed.stdout and "finished" in listed.stdout, listed.stderr
    refused = run_cli(tmp_path, "resume", run_id[:-3], "--steps", "60", "--workers", "3")
    assert refused.returncode == 2 and "Invalid value for argument '--workers'" in refused.stderr, refused.stderr
    resumed = run_cli(tmp_path, "resume", run_id[:-3], "--steps", "60", "--workers", "1", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "steps          60/60" in resumed.stdout and "workers=1" in resumed.stdout
    shown = run_cli(tmp_path, "show", run_id)
    assert shown.returncode == 0 and "status         finished" in shown.stdout and "steps          60/60" in shown.stdout
    assert "checkpoint     step 60" in shown.stdout, shown.stdout
    import workbench as wb

    h = wb.history(tmp_path / "home" / "runs" / run_id)
    assert list(h[h.worker == "worker:0"].step) == list(range(1, 61))
    assert list(h[h.worker == "worker:1"].step) == list(range(1, 41)), "the second worker left at the resume"
