"""The headless CLI: same runs as the notebook, a progress bar, a summary, clear errors."""

import os
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
    assert "40/40" in out.stdout.split("run ")[0]  # the progress bar reached the end


def test_cli_refuses_bad_arguments_before_starting_a_cluster(tmp_path):
    out = run_cli(tmp_path, "train", "--strategy", "paramserver")
    assert out.returncode == 2
    assert "Invalid value for argument 'strategy'" in out.stderr and "Did you mean 'parameter_server'" in out.stderr
    assert not (tmp_path / "home" / "ipython").exists(), "a cluster was started for a bad argument"
