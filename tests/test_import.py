import subprocess
import sys


def test_import_does_not_import_tensorflow():
    code = "import sys, workbench; print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


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
}
# TensorFlow and Keras are imported on engines only: at module level in engine/, and inside the
# functions of the modules whose functions run on engines (models, datasets, schedules).
TF_INSIDE_FUNCTIONS = {"models", "datasets", "schedules"}


def imports():
    """(importing module's part, imported name, module-level or not, where) for every import."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "workbench"
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        package = parts[:-1] if path.name != "__init__.py" else parts
        part = parts[1] if len(parts) > 2 or (len(parts) == 2 and path.name == "__init__.py") else parts[-1]
        if parts == ("workbench", "__init__"):
            part = "workbench"
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = list(package[:len(package) - node.level + 1]) if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                # `from workbench import records` imports workbench.records
                names = ([] if module == "workbench" else [module]) + [f"{module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                yield part, name, id(node) in top, f"{path.relative_to(root.parent)}:{node.lineno}"


def test_each_part_imports_only_what_it_may():
    wrong = []
    for part, name, _, where in imports():
        pieces = name.split(".")
        if pieces[0] != "workbench":
            continue
        target = pieces[1] if len(pieces) > 1 and pieces[1] in MAY_IMPORT else "workbench"
        if target != part and target not in MAY_IMPORT[part]:
            wrong.append(f"{where}: {part} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_tensorflow_is_imported_on_engines_only():
    wrong = [f"{where}: {part} imports {name}" for part, name, top, where in imports()
             if name.split(".")[0] in ("tensorflow", "keras")
             and not (part == "engine" or (part in TF_INSIDE_FUNCTIONS and not top))]
    assert not wrong, "\n".join(wrong)


def test_the_rules_see_every_part():
    """A new folder or top-level module must be given its place in the rules."""
    assert {part for part, *_ in imports()} <= set(MAY_IMPORT)
