"""The kernel's modules import one another without a circle: every import statement,
those inside functions included, draws an arrow, and the arrows run one way. Each module
imports in a fresh interpreter."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import workbench.kernel

KERNEL = Path(workbench.kernel.__file__).parent
MODULES = sorted(p.stem for p in KERNEL.glob("*.py") if p.stem != "__init__")


def _imports(module, source=None):
    """The kernel modules ``module`` imports anywhere in its source."""
    out = set()
    source = (KERNEL / f"{module}.py").read_text() if source is None else source
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["workbench", "kernel"] and len(parts) > 2 and parts[2] in MODULES:
                out.add(parts[2])
    return out - {module}


def _cycle(graph):
    """One import circle in ``graph`` (module -> modules it imports) as a path, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_scan_finds_imports_inside_functions_and_circles():
    """The scan itself: a lazy import is an arrow, and a circle through it is found."""
    lazy = "import os\n\ndef f():\n    from workbench.kernel import run, nothing\n    import workbench.kernel.pool\n"
    assert _imports("x", lazy) == {"run", "pool"}
    assert "launch" in _imports("cluster")
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_kernel_modules_import_one_another_without_a_circle():
    graph = {m: _imports(m) for m in MODULES}
    circle = _cycle(graph)
    assert circle is None, f"import circle in workbench/kernel: {' -> '.join(circle)}"


@pytest.mark.parametrize("module", MODULES)
def test_each_kernel_module_imports_first_in_a_fresh_interpreter(module):
    done = subprocess.run([sys.executable, "-c", f"import workbench.kernel.{module}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
