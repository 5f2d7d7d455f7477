"""Build the walkthrough notebooks from the cell lists in ``tools/walkthroughs/``, then execute them in place so
they are saved with outputs (``python tools/make_notebooks.py [name ...]``).

Cells whose outputs vary between executions (PIDs, ports, timings) carry the
``nbval-ignore-output`` tag; every other output is compared by nbval in the suite.
"""

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


def build(name):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = notebooks()[name]()
    path = ROOT / "notebooks" / f"{name}.ipynb"
    nbformat.write(nb, path)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                    "--inplace", "--ExecutePreprocessor.timeout=900", str(path)], check=True)
    print("wrote", path)


if __name__ == "__main__":
    for name in sys.argv[1:] or notebooks():
        build(name)
