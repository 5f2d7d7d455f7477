"""A user's own notebooks under plain ``pytest --nbval``, outside this repository, with the
workbench installed as a package is (its entry points, nothing copied): a notebook written,
executed and saved passes on re-execution, twice; a folder of notebooks runs on one cluster
that every notebook finds fresh, and that stops, with every process it started, at the
session's end, also when a notebook fails while its run trains."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import psutil
import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def installed(tmp_path):
    """The environment of a user who installed this checkout: its distribution's metadata,
    with the entry points pyproject.toml declares, on the path beside the code (as
    ``pip install -e .`` does; that command here would re-point this machine's own
    editable install). Returns the environment for the user's commands."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = tmp_path / "site" / f"workbench-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: workbench\nVersion: {project['version']}\n")
    points = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
                     for group, entries in project["entry-points"].items())
    (info / "entry_points.txt").write_text(points)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(ROOT)])
    return env


def write(path, *cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c.strip()) for c in cells]
    nbformat.write(nb, path)


def execute(path, env, allow_errors=False):
    """What the user does in JupyterLab: run every cell, save."""
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                    *(["--allow-errors"] if allow_errors else []), str(path)],
                   env=env, cwd=path.parent, check=True, capture_output=True, timeout=600)


def workflow_command():
    """The test command of the GitHub Actions workflow docs/testing.md gives users."""
    text = (ROOT / "docs" / "notebooks-workflow.yml").read_text()
    return re.findall(r"run: (python -m pytest\b.*)", text)[0].split()


def pytest_run(folder, env, *args):
    """The workflow's command in ``folder``: (its pid, its exit code, its output)."""
    proc = subprocess.Popen([sys.executable, *workflow_command()[1:], *args], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=900)
    return proc.pid, proc.returncode, out


MINE = (
    "import workbench as wb\ncluster = wb.Cluster(4).start()",
    "digits = wb.datasets.digits()\n"
    "mwms = cluster.train(wb.models.mlp(hidden=(64, 32)), digits, strategy='multi_worker_mirrored', workers=2,\n"
    "                     global_batch_size=128, steps=200, learning_rate=0.1, seed=0)\nmwms.wait()",
    "pss = cluster.train(wb.models.mlp(hidden=(64, 32)), digits, strategy='parameter_server', workers=2, ps=1,\n"
    "                    global_batch_size=128, steps=200, learning_rate=0.1, seed=0)\npss.wait()",
    "print('final loss, all-reduce:', round(mwms.history.groupby('step').loss.mean().iloc[-1], 3))\n"
    "wb.within(pss.evaluation['test_accuracy'], 0.8, 1.0, 'parameter-server test accuracy')",
    "wb.compare(mwms, pss)",
    "cluster.stop()",
)


def test_a_users_notebook_passes_plain_pytest_nbval_twice(tmp_path):
    """Cells that wait for runs (their dashboards' final renderings), an asynchronous run
    whose numbers vary, a band, a comparison: green on re-execution, twice, with the
    workflow's command in a folder holding nothing but the notebook. Failed before the
    plugin: the waiting cells' dashboards said "running · step 0/200", the comparison's
    speeds differed."""
    env = installed(tmp_path)
    folder = tmp_path / "mine"
    folder.mkdir()
    write(folder / "my.ipynb", *MINE)
    execute(folder / "my.ipynb", env)
    for attempt in (1, 2):
        _, code, out = pytest_run(folder, env, "-p", "no:cacheprovider")
        assert code == 0 and "6 passed" in out, f"attempt {attempt}:\n{out[-6000:]}"


def _recorded(name):
    return ("import json, subprocess, sys\n"
            f"json.dump({{'tag': cluster.cluster_tag, 'pids': sorted(int(p) for p in cluster.engines.pid)}}, "
            f"open('{name}.json', 'w'))\n"
            "# a process this kernel starts (a second Python, say) gets no offer of the session's cluster\n"
            "print(subprocess.run([sys.executable, '-c', 'from workbench.kernel.launchers.borrowed import offered; "
            "print(offered())'], capture_output=True, text=True).stdout.strip())")


def test_a_folder_of_notebooks_shares_one_cluster_that_stops_at_the_end(tmp_path):
    """Three notebooks, each starting "its own" local cluster: they run on the session's
    cluster, each finds its engines fresh (one after a notebook that changed topology, one
    after a notebook that asked for fewer engines), a notebook asking for more engines than
    it has gets a larger one in its place, and the one that fails while its run trains
    leaves nothing running once pytest exits. Failed before the
    plugin: each notebook's cluster had a controller and engines of its own."""
    env = installed(tmp_path)
    folder = tmp_path / "suite"
    folder.mkdir()
    fresh = "import workbench as wb\ncluster = wb.Cluster({n}).start()\nsorted(set(cluster.engines.tf_state))"
    train = ("run = cluster.train(wb.models.mlp(), wb.datasets.digits(), strategy={strategy!r}, workers={workers}, "
             "ps={ps}, steps={steps}, global_batch_size=64, checkpoint_every=0, seed=0)")
    write(folder / "a_topologies.ipynb", fresh.format(n=3),
          train.format(strategy="multi_worker_mirrored", workers=2, ps=0, steps=60) + "\nrun.wait()",
          train.format(strategy="parameter_server", workers=1, ps=1, steps=60) + "\nrun.wait()",
          _recorded("a"), "cluster.stop()\ncluster")
    write(folder / "b_more_engines.ipynb", fresh.format(n=4),
          train.format(strategy="multi_worker_mirrored", workers=4, ps=0, steps=40) + "\nrun.wait()",
          _recorded("b"))
    write(folder / "c_fails.ipynb", fresh.format(n=2),
          train.format(strategy="multi_worker_mirrored", workers=2, ps=0, steps=1_000_000), _recorded("c"),
          "assert run.step < 0, 'this notebook fails while its run trains'")
    # and a test file after them: the session's cluster stops before it (nothing of ours
    # runs beside a user's other tests)
    (folder / "test_after.py").write_text(
        "import psutil\n\n\ndef test_nothing_the_notebooks_started_runs():\n"
        "    left = [' '.join(p.cmdline()) for p in psutil.Process().children(recursive=True)]\n"
        "    assert not left, left\n")
    for name in ("a_topologies", "b_more_engines"):
        execute(folder / f"{name}.ipynb", env)
    execute(folder / "c_fails.ipynb", env, allow_errors=True)

    session, code, out = pytest_run(folder, env, "-p", "no:cacheprovider", "-rf")
    failed = re.findall(r"^FAILED (.+?) - ", out, re.M)
    assert code == 1 and failed == ["c_fails.ipynb::Cell 3"], out[-6000:]
    seen = {name: json.loads((folder / f"{name}.json").read_text()) for name in "abc"}
    # a's 3 engines were too few for b: b got a new cluster of 4, which c (2) borrowed
    assert seen["a"]["tag"] != seen["b"]["tag"] == seen["c"]["tag"], seen
    tags = {s["tag"] for s in seen.values()}
    pids = {p for s in seen.values() for p in s["pids"]}

    def ours(p):  # its controllers, zygotes, engines and their stand-ins, its reapers
        cmd = " ".join(p.info["cmdline"] or [])
        return (p.pid in pids or any(tag in cmd for tag in tags) or f"wbz-{session}-" in cmd
                or ("reaper" in cmd and str(session) in cmd))

    left = [(p.pid, " ".join(p.info["cmdline"] or [])[:120]) for p in psutil.process_iter(["cmdline"]) if ours(p)]
    assert not left, f"processes of the session's clusters {sorted(tags)} left running: {left}"
