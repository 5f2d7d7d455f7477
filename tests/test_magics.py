"""``%load_ext workbench``: ``%wb`` lists, loads, stops, resumes and opens TensorBoard on
runs, as thin as the API, with its errors."""

import re
import time
import urllib.request

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import workbench as wb
from workbench import tensorboard
from workbench.kernel import magics


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    return ip


def test_help_and_errors_are_clear_without_a_traceback(shell, capsys):
    shell.run_line_magic("wb", "--help")
    out = capsys.readouterr().out
    assert "usage: %wb" in out and "resume" in out and "tensorboard" in out
    shell.run_line_magic("wb", "resume --help")
    assert "--steps" in capsys.readouterr().out
    with pytest.raises(UsageError, match="Invalid value for argument 'run_id'. Received: run_id='nosuch'"):
        magics.wb("load nosuch", shell)
    with pytest.raises(UsageError, match="invalid choice: 'frobnicate'"):
        magics.wb("frobnicate", shell)


@pytest.mark.cluster
def test_wb_lists_stops_resumes_loads_and_opens_tensorboard(shell, capsys):
    with wb.Cluster(engines=1) as cluster:
        run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="single", workers=1,
                            steps=10**6, global_batch_size=64, checkpoint_every=0, dashboard=False)
        end = time.monotonic() + 120
        while run.step < 30:
            assert time.monotonic() < end, f"step 30 not reached: at {run.step}"
            time.sleep(0.05)
        shell.run_line_magic("wb", "")
        out = capsys.readouterr().out
        assert "Clusters (1):" in out and "Runs (" in out
        assert re.search(rf"{run.id}\s+running\s+single", out), out
        shell.run_line_magic("wb", f"stop {run.id[:-1]}")
        assert run.done and run.stopped and f"stopped at step {run.final_step}" in capsys.readouterr().out
        shell.run_line_magic("wb", f"resume {run.id} --steps {run.final_step + 40}")
        resumed = shell.user_ns["run"]
        assert resumed.wait(timeout=300).final_step == run.final_step + 40
        with pytest.raises(UsageError, match="ConfigError: Invalid value for argument 'steps'"):
            magics.wb(f"resume {run.id} --steps 0", shell)
    capsys.readouterr()
    shell.run_line_magic("wb", f"load {run.id}")
    loaded = shell.user_ns["run"]
    assert loaded.status == "finished" and loaded.final_step == resumed.final_step
    shell.run_line_magic("wb", f"tensorboard {run.id}")
    url = re.search(r"http://127\.0\.0\.1:\d+/", capsys.readouterr().out).group(0)
    end = time.monotonic() + 60
    while True:
        try:
            assert urllib.request.urlopen(url, timeout=2).status == 200
            break
        except OSError as e:
            assert time.monotonic() < end, f"TensorBoard not answering at {url}: {e}"
            time.sleep(0.2)
    tensorboard.stop_all()
