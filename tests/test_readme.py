"""The README's two commands: the first installs and opens JupyterLab on the quickstart,
the second is exactly what .ci/run runs."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_ci_runs_exactly_the_readmes_test_command():
    first, second = quickstart_commands()[:2]
    assert "pytest" in second and "jupyter lab" in first
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[-1] == second


def test_the_readmes_test_command_first_installs_the_debian_packages_the_suite_drives():
    """On a fresh machine (root, Debian, pip) the README's second command alone puts in place
    what the suite drives outside Python: tools/system-packages.sh installs every program the
    test bed, its Slurm, the MPI launcher and the browser test look for; here, where they
    are, it does nothing."""
    from workbench.kernel.testbed import bed, slurm

    second = quickstart_commands()[1]
    assert second.startswith("bash tools/system-packages.sh && python -m pip install"), second
    script = ROOT / "tools" / "system-packages.sh"
    needed = set(re.findall(r"^need (\S+) (\S+)$", script.read_text(), re.MULTILINE))
    wanted = set(bed._PACKAGES.items()) | set(slurm.PACKAGES.items()) | {("mpiexec", "openmpi-bin"),
                                                                          ("chromium", "chromium")}
    assert wanted <= needed, f"not installed by {script.name}: {sorted(wanted - needed)}"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_readmes_first_command_installs_and_serves_the_quickstart(tmp_path):
    first = quickstart_commands()[0]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JUPYTER_PORT=str(port), BROWSER="true", JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log = tmp_path / "lab.log"
    proc = subprocess.Popen(first, shell=True, cwd=ROOT, env=env, stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 300
        while True:
            match = re.search(rf"http://(?:localhost|127\.0\.0\.1):{port}/lab\?token=(\w+)", log.read_text())
            if match:
                break
            assert proc.poll() is None, f"the command exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < end, f"JupyterLab did not start: {log.read_text()[-3000:]}"
            time.sleep(0.2)
        # JupyterLab serves the notebook's folder and opens the notebook in it
        url = f"http://localhost:{port}/api/contents/00_quickstart.ipynb?token={match.group(1)}&content=0"
        # the URL is logged as the server starts: give it until a deadline to accept (once, in
        # a full CI run on a loaded machine, the first request right after the line was refused)
        end = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    assert r.status == 200 and json.loads(r.read())["type"] == "notebook"
                break
            except urllib.error.URLError as e:
                assert proc.poll() is None, f"the command exited: {log.read_text()[-3000:]}"
                assert time.monotonic() < end, f"{url} refused for 60 s ({e}): {log.read_text()[-3000:]}"
                time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the command's own process group: pip and jupyter
        proc.wait(60)


def test_every_walkthrough_is_listed_in_the_notebooks_readme_in_order():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "notebooks"
    names = sorted(p.stem for p in folder.glob("*.ipynb"))
    text = (folder / "README.md").read_text()
    assert [n for n in names if f"[`{n}`]({n}.ipynb)" in text] == names
    assert [text.index(f"[`{n}`]") for n in names] == sorted(text.index(f"[`{n}`]") for n in names)
    assert len(names) >= 10  # 00-09: the glob found the walkthroughs


def test_the_guides_layout_lists_every_module():
    section = (ROOT / "docs" / "guide.md").read_text().split("## Layout, module by module", 1)[1]
    listed = " ".join(re.findall(r"`([^`]+)`", section))
    package = ROOT / "workbench"
    missing = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        folder = path.parent.relative_to(package).as_posix() + "/"
        if name not in listed and not (path.parent.name == "strategies" and folder in listed) \
                and name.removesuffix("/__init__.py") + "/" not in listed:
            missing.append(name)
    assert not missing, f"docs/guide.md's layout does not list: {', '.join(missing)}"


def test_the_saved_walkthroughs_print_plain_numbers():
    """What a reader sees of a number is the number: a walkthrough converts numpy scalars
    before it prints them in a dict or a list (NumPy 2 writes np.float64(14.89) there).
    Most such cells are not compared by nbval (their numbers vary), so this reads them."""
    import nbformat

    seen = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for output in cell.get("outputs", []):
                text = output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
                seen += [(path.name, m) for m in re.findall(r"np\.\w+\([^)]*\)", text)]
    assert not seen, seen


def test_each_walkthrough_says_how_long_it_ran_and_whether_it_needs_root_as_its_saved_cells_say(monkeypatch):
    """Issue 39: each notebook says at its top how long it runs here and whether it needs
    root. The number is its saved execution's own (first cell to last reply, from the
    cells' metadata), written by tools/make_notebooks.py, and notebooks/README.md agrees."""
    import nbformat

    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import make_notebooks as mk

    readme = (ROOT / "notebooks" / "README.md").read_text()
    for name in mk.notebooks():
        nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        title = nb.cells[0].source.split("\n")
        root = mk.needs_root(nb)  # its code builds emulated hosts
        assert root == (name in ("01_data_vs_model_parallelism", "08_scaling_out", "09_network_bottleneck")), name
        assert title[2] == mk.stamp_line(mk.run_time(nb), root), (name, title[:3])
        row = next(line for line in readme.splitlines() if line.startswith(f"| [`{name}`]"))
        assert row.endswith(f"| {mk.readme_time(mk.run_time(nb), root)} |"), row


def test_the_teaching_claims_page_quotes_the_saved_notebooks():
    """docs/teaching.md is written from the walkthroughs' saved outputs (tools/teaching.py):
    a notebook executed again without it being rewritten fails here, and every claim's
    pattern still finds its lines."""
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "teaching.py"), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
