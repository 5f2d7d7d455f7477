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
