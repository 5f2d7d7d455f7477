import ast
import json
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest


def fresh(code):
    """What ``code`` prints, run in a fresh interpreter (nothing imported yet)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_import_does_not_import_tensorflow():
    out = fresh("import sys, workbench; print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    assert out.split() == ["False", "False"]


def test_the_jupyter_server_extension_does_not_import_the_kernel_side():
    """The Jupyter server loads ``workbench.lab`` (and its handlers): the package's public
    names are imported on first use, so the kernel side stays out of the server."""
    out = fresh("import json, sys, workbench.lab, workbench.lab.handlers\n"
                "print(json.dumps(sorted(m for m in sys.modules if m.startswith('workbench.'))))")
    loaded = json.loads(out)
    assert "workbench.lab.handlers" in loaded
    assert [m for m in loaded if m.startswith("workbench.kernel")] == [], loaded


def test_public_names_are_imported_on_first_use():
    out = fresh("import sys, workbench as wb\n"
                "before = 'workbench.kernel.cluster' in sys.modules\n"
                "print(before, wb.Cluster.__module__, 'Cluster' in dir(wb), wb.datasets.__name__)")
    assert out.split() == ["False", "workbench.kernel.cluster", "True", "workbench.datasets"]


def test_public_names_are_exported():
    import workbench as wb

    for name in wb.__all__:
        assert hasattr(wb, name), name
    assert "Cluster" in wb.__all__


# Who may import whom. A module's part is its folder under workbench/ (kernel, engine, common,
# store, lab) or, for a top-level module, its own name. Imports inside functions count: a lazy
# import is still an arrow.
MAY_IMPORT = {
    "common": {"errors"},
    "errors": set(),
    "store": {"common", "errors"},
    "engine": {"common", "store", "errors", "models", "datasets", "schedules"},
    "lab": {"store", "common", "errors", "tensorboard"},
    "tensorboard": {"store", "common", "errors"},
    "models": {"common", "errors"},
    "datasets": {"common", "errors"},
    "schedules": {"common", "errors"},
    "kernel": {"common", "store", "engine", "errors", "models", "datasets", "schedules", "tensorboard",
               "workbench"},
    "cli": {"kernel", "common", "store", "errors", "workbench", "models", "datasets"},
    "__main__": {"cli"},
    "workbench": {"kernel", "common", "store", "errors", "models", "datasets", "schedules"},
    "testing": {"kernel", "engine", "errors"},  # wb.within, the pytest plugin for notebooks, its shared cluster
}
# TensorFlow and Keras are imported on engines only: at module level in engine/, and inside the
# functions of the modules whose functions run on engines (models, datasets, schedules).
TF_INSIDE_FUNCTIONS = {"models", "datasets", "schedules"}
# What the Jupyter server loads (lab) and what every process reads (store) stays light.
NEVER_IMPORTS = {"store": ("ipyparallel",), "lab": ("ipyparallel",)}

ROOT = Path(__file__).resolve().parents[1] / "workbench"
Import = namedtuple("Import", "module part name top where")


def imports():
    """Every import statement in workbench/, those inside functions included, as ``Import``s:
    the importing module ("workbench.kernel.runs.handle"), its part, the imported name, whether it
    is at module level, and where it is."""
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        package = parts[:-1]
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pieces = module.split(".")
        part = pieces[1] if len(pieces) > 1 else "workbench"
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = list(package[:len(package) - node.level + 1]) if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                # `from workbench import records` imports workbench.records
                names = ([] if source == "workbench" else [source]) + [f"{source}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                yield Import(module, part, name, id(node) in top, f"{path.relative_to(ROOT.parent)}:{node.lineno}")


def test_each_part_imports_only_what_it_may():
    wrong = []
    for i in imports():
        pieces = i.name.split(".")
        if pieces[0] != "workbench":
            continue
        target = pieces[1] if len(pieces) > 1 and pieces[1] in MAY_IMPORT else "workbench"
        if target != i.part and target not in MAY_IMPORT[i.part]:
            wrong.append(f"{i.where}: {i.part} imports {i.name}")
    assert not wrong, "\n".join(wrong)


def test_tensorflow_is_imported_on_engines_only():
    wrong = [f"{i.where}: {i.part} imports {i.name}" for i in imports()
             if i.name.split(".")[0] in ("tensorflow", "keras")
             and not (i.part == "engine" or (i.part in TF_INSIDE_FUNCTIONS and not i.top))]
    assert not wrong, "\n".join(wrong)


def test_the_store_and_the_panel_server_never_import_ipyparallel():
    wrong = [f"{i.where}: {i.part} imports {i.name}" for i in imports()
             if i.name.split(".")[0] in NEVER_IMPORTS.get(i.part, ())]
    assert not wrong, "\n".join(wrong)


def test_the_rules_see_every_part():
    """A new folder or top-level module must be given its place in the rules."""
    assert {i.part for i in imports()} <= set(MAY_IMPORT)


# -- what starts an engine's process ---------------------------------------------------------

# ``workbench/engine/startup`` (start, zygote, forked, inventory) runs before the engine has a
# task: the launchers' commands, the zygote that forks engines, what an engine reports at
# registration. It imports within itself, ``common``, ``store`` and ``errors``, never the rest
# of ``engine/`` (which imports it: ``entry.py`` waits for the start-up import's thread), and
# TensorFlow only inside functions (the start-up import's thread, the zygote's one import).
STARTUP = "workbench.engine.startup"
STARTUP_MAY_IMPORT = {"common", "store", "errors"}


def test_the_engines_start_up_imports_only_what_it_may():
    seen, wrong = set(), []
    for i in imports():
        if not i.module.startswith(STARTUP + "."):
            continue
        seen.add(i.module)
        pieces = i.name.split(".")
        if pieces[0] in ("tensorflow", "keras") and i.top:
            wrong.append(f"{i.where}: imports {i.name} at module level")
        elif pieces[0] == "workbench" and not i.name.startswith(STARTUP) \
                and (len(pieces) < 2 or pieces[1] not in STARTUP_MAY_IMPORT):
            wrong.append(f"{i.where}: imports {i.name}")
    assert {f"{STARTUP}.{m}" for m in ("start", "zygote", "forked", "inventory")} <= seen, seen
    assert not wrong, "\n".join(wrong)


# -- the kernel's rooms and their modules import one another without a circle ---------------

# ``workbench/kernel`` is a facade (``cluster.py``, ``magics.py``) over five rooms, each a
# folder: a module is named by its path below kernel ("runs.handle"), its room is the folder
# ("runs"; "top" for the facade's modules).
KERNEL_MODULES = sorted(".".join(p.relative_to(ROOT / "kernel").with_suffix("").parts)
                        for p in (ROOT / "kernel").rglob("*.py") if p.stem != "__init__")


def kernel_graph():
    """{kernel module: the kernel modules it imports anywhere in its source}."""
    graph = {m: set() for m in KERNEL_MODULES}
    for i in imports():
        pieces = i.name.split(".")
        if i.part == "kernel" and pieces[:2] == ["workbench", "kernel"] and len(pieces) > 2:
            source, target = i.module.split(".", 2)[-1], ".".join(pieces[2:])
            if target in graph and target != source:
                graph[source].add(target)
    return graph


def cycle(graph):
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
    assert any(not i.top and i.name.startswith("workbench.kernel") for i in imports() if i.part == "kernel")
    assert "runs.launch" in kernel_graph()["cluster"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_kernel_modules_import_one_another_without_a_circle():
    circle = cycle(kernel_graph())
    assert circle is None, f"import circle in workbench/kernel: {' -> '.join(circle)}"


# The rooms, lowest first: a room imports the rooms below it, never one above, so each reads
# without those above it. The facade (cluster.py, magics.py) may import every room.
ROOM_MAY_IMPORT = {
    "engines": set(),  # the pool of engines, their processes and health
    "launchers": {"engines"},  # the processes a cluster starts: local, MPI/Slurm, SSH, zygote, reaper
    "runs": {"engines", "launchers"},  # a run: its job, launch, handle, log, watcher, recovery, records
    "views": {"runs"},  # what draws runs: dashboard, live stats, static renderings, compare
    "testbed": {"engines", "launchers", "runs"},  # emulated hosts, links, Slurm: watches runs on its hosts
    "top": {"engines", "launchers", "runs", "views", "testbed"},
}
# The one arrow up, each place named: a run draws itself (``Run.dashboard()``, a recorded
# run's static rendering), imported inside those methods only.
SANCTIONED_UP = {("runs.handle", "views.dashboard"), ("runs.recorded", "views.render")}


def room(module):
    return module.split(".")[0] if "." in module else "top"


def test_each_room_of_the_kernel_imports_only_the_rooms_below_it():
    wrong = []
    for i in imports():
        pieces = i.name.split(".")
        if i.part != "kernel" or pieces[:2] != ["workbench", "kernel"] or len(pieces) < 3:
            continue
        source, target = i.module.split(".", 2)[-1], ".".join(pieces[2:])
        if target not in KERNEL_MODULES:
            continue  # a room's package itself
        if room(target) == room(source) or room(target) in ROOM_MAY_IMPORT[room(source)]:
            continue
        if (source, target) in SANCTIONED_UP and not i.top:
            continue
        wrong.append(f"{i.where}: {room(source)} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_each_room_holds_at_most_ten_modules_and_no_module_is_over_450_lines():
    rooms = {}
    for m in KERNEL_MODULES:
        rooms.setdefault(room(m), []).append(m)
    assert all(len(ms) <= 11 for ms in rooms.values()), rooms
    long = [f"{p.relative_to(ROOT.parent)}: {n}" for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 450]
    assert not long, long


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_each_kernel_module_imports_first_in_a_fresh_interpreter(module):
    fresh(f"import workbench.kernel.{module}")


# -- every public function says what it takes and returns ------------------------------------

def public_functions():
    """``(path, line, qualified name, node)`` of every public function and method in
    workbench/: module-level functions and the methods of module-level classes (nested too)
    whose names do not start with ``_``, and the constructors of public classes."""
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT.parent)

        def walk(body, owner):
            for node in body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    yield from walk(node.body, f"{owner}{node.name}.")
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        not node.name.startswith("_") or (owner and node.name == "__init__")):
                    yield where, node.lineno, f"{owner}{node.name}", node

        yield from walk(ast.parse(path.read_text()).body, "")


def unannotated(node, method):
    """The parameters of ``node`` (a function's ast) without an annotation, and "return" if
    its return has none; a method's ``self`` / ``cls`` needs none."""
    a = node.args
    params = a.posonlyargs + a.args
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if method and not static:
        params = params[1:]
    params = [*params, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
    return [p.arg for p in params if p.annotation is None] + (["return"] if node.returns is None else [])


def test_the_annotation_scan_finds_what_is_missing():
    tree = ast.parse("class C:\n    def m(self, a, b: int, *rest, **kw) -> None: ...\n"
                     "    @staticmethod\n    def s(x): ...\ndef f(y: int): ...")
    m, s = tree.body[0].body
    assert unannotated(m, method=True) == ["a", "rest", "kw"]
    assert unannotated(s, method=True) == ["x", "return"]
    assert unannotated(tree.body[1], method=False) == ["return"]


def test_every_public_function_annotates_its_parameters_and_return():
    missing = [f"{where}:{line} {name}: {', '.join(names)}" for where, line, name, node in public_functions()
               if (names := unannotated(node, method="." in name))]
    assert not missing, f"{len(missing)} public functions lack annotations:\n" + "\n".join(missing)
