"""Build the walkthrough notebooks from the cell lists in ``tools/walkthroughs/``, then execute them in place so
they are saved with outputs (``python tools/make_notebooks.py [name ...]``).

Cells whose outputs vary between executions (PIDs, ports, timings) carry the
``nbval-ignore-output`` tag; every other output is compared by nbval in the suite.
"""

import math
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
WALKTHROUGHS = ROOT / "tools" / "walkthroughs"


def md(text):
    return nbformat.v4.new_markdown_cell(text.strip())


def code(text, volatile=False):
    """A code cell; ``volatile=True`` tags it so nbval runs it but does not compare output."""
    cell = nbformat.v4.new_code_cell(text.strip())
    if volatile:
        cell.metadata["tags"] = ["nbval-ignore-output"]
    return cell


def notebooks():
    """{name: cells function} of every walkthrough module (``tools/walkthroughs/w*.py``)."""
    import importlib

    sys.path[:0] = [str(ROOT / "tools"), str(WALKTHROUGHS)]
    out = {}
    for path in sorted(WALKTHROUGHS.glob("w*.py")):
        module = importlib.import_module(path.stem)
        out[module.NAME] = module.cells
    return out


STAMP = "*Run time here:"  # the line ``stamp`` writes under a notebook's title


def needs_root(nb) -> bool:
    """Does ``nb`` build emulated hosts (``wb.testbed``), which need root?"""
    return any("wb.testbed(" in c.source for c in nb.cells if c.cell_type == "code")


def run_time(nb) -> float:
    """Seconds from the first cell's execution to the last one's reply, as saved with ``nb``."""
    from datetime import datetime

    times = [c.metadata.get("execution", {}) for c in nb.cells if c.cell_type == "code"]
    starts = [datetime.fromisoformat(t["iopub.execute_input"].rstrip("Z")) for t in times if "iopub.execute_input" in t]
    ends = [datetime.fromisoformat(t["shell.execute_reply"].rstrip("Z")) for t in times if "shell.execute_reply" in t]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else float("nan")


def stamp_line(seconds, root):
    """The line under a notebook's title: its run time and whether it needs root (``root``)."""
    needs = ("needs root (its emulated hosts); without root those cells say so and are skipped"
             if root else "needs no root")
    return (f"{STAMP} {seconds:.0f} s* in the execution saved with it, on this project's 2-core machine without "
            f"a GPU (a loaded machine takes longer); it {needs}.")


def readme_time(seconds, root):
    """The notebooks' README's run-time column for a notebook (``root``: it needs root)."""
    return f"{seconds:.0f} s" + (" (root)" if root else "")


def stamp(name):
    """Write under the notebook's title how long its saved execution took and whether it
    needs root, the number read from the saved cells' own execution times, and the same
    in notebooks/README.md's row for it."""
    import re

    path = ROOT / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    seconds, root = run_time(nb), needs_root(nb)
    if math.isnan(seconds):
        raise SystemExit(f"{path} holds no execution times: execute it first (python tools/make_notebooks.py {name})")
    title = nb.cells[0]  # "# The title", a blank line, the text
    lines = title.source.split("\n")
    if lines[2:3] and lines[2].startswith(STAMP):  # stamped before: that line and the blank one before it go
        del lines[1:3]
    lines[1:1] = ["", stamp_line(seconds, root)]
    title.source = "\n".join(lines)
    nbformat.write(nb, path)
    readme = ROOT / "notebooks" / "README.md"
    row = re.compile(rf"^(\| \[`{re.escape(name)}`\].*\| )[^|]+( \|)$", re.M)
    text, found = row.subn(lambda m: m.group(1) + readme_time(seconds, root) + m.group(2), readme.read_text())
    if not found:
        raise SystemExit(f"notebooks/README.md has no row for {name}: add one to its table")
    readme.write_text(text)


def build(name):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = notebooks()[name]()
    path = ROOT / "notebooks" / f"{name}.ipynb"
    nbformat.write(nb, path)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                    "--inplace", "--ExecutePreprocessor.timeout=900", str(path)], check=True)
    stamp(name)
    print("wrote", path)
    import teaching  # tools/: docs/teaching.md quotes the notebooks' outputs

    teaching.OUT.write_text(teaching.render())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stamp"]:  # only (re)write the run-time lines from the saved executions
        for name in sys.argv[2:] or notebooks():
            stamp(name)
    else:
        for name in sys.argv[1:] or notebooks():
            build(name)
