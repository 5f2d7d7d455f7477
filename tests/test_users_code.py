"""A user's functions travel to engines with their source (``common/payload.py``): AutoGraph
converts a loss written in a notebook cell, and an engine's error shows the user's cell and
line before the engine's own frames."""

import linecache
import os
import re
import subprocess
import sys
import textwrap
import traceback

import nbformat
import pytest
from IPython.core.ultratb import AutoFormattedTB
from nbclient import NotebookClient

from workbench.common import payload
from workbench.kernel.runs.watcher import users_frames

# what a notebook cell is to Python: source in linecache only, under a file name that exists
# nowhere (ipykernel names it /tmp/ipykernel_<pid>/<hash>.py)
CELL = "/tmp/ipykernel_0/not-on-any-disk.py"
CELL_SOURCE = textwrap.dedent("""\
    def scaled(values):
        halve = lambda v: v / 2
        def twice(v):
            return v * 2
        return twice(halve(values))
""")


def cell_function():
    linecache.cache[CELL] = (len(CELL_SOURCE), None, CELL_SOURCE.splitlines(True), CELL)
    namespace = {"__name__": "__main__"}
    exec(compile(CELL_SOURCE, CELL, "exec"), namespace)
    return namespace["scaled"]


def test_a_cells_function_and_the_functions_in_it_keep_their_source_in_another_process(tmp_path):
    fn = cell_function()
    (tmp_path / "job").write_bytes(payload.dumps(fn))
    probe = textwrap.dedent(f"""\
        import inspect, cloudpickle
        fn = cloudpickle.loads(open({str(tmp_path / "job")!r}, "rb").read())
        inner = [c for c in fn.__code__.co_consts if hasattr(c, "co_code")]
        print(fn(3.0), fn.__code__.co_filename)
        print(inspect.getsource(fn).splitlines()[0])
        print(sorted(inspect.getsourcelines(c)[0][0].strip() for c in inner))
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        f"3.0 {CELL}", "def scaled(values):", "['def twice(v):', 'halve = lambda v: v / 2']"]
    assert not os.path.exists(CELL)


@pytest.mark.parametrize("formatter", ["python", "ipython"])
def test_an_engines_traceback_gives_the_users_frames_with_their_lines(formatter):
    """An engine's traceback as Python or IPython writes it (IPython writes the home as ~):
    the frames in files whose code this kernel shipped, with their source lines."""
    home_cell = os.path.expanduser("~/not-on-any-disk/cell.py")
    source = "def fails(x):\n    return check(x)\n\ndef check(x):\n    raise ValueError(x)\n"
    linecache.cache[home_cell] = (len(source), None, source.splitlines(True), home_cell)
    namespace = {"__name__": "__main__"}
    exec(compile(source, home_cell, "exec"), namespace)
    payload.dumps(namespace["fails"])  # shipped
    try:
        namespace["fails"](1)
    except ValueError as e:
        if formatter == "python":
            text = "".join(traceback.format_exception(e))
        else:
            text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(AutoFormattedTB(mode="Context").structured_traceback(
                type(e), e, e.__traceback__)))
    shown = "File ~/not-on-any-disk/cell.py:2" if formatter == "ipython" else f'File "{home_cell}", line 2'
    assert shown in text
    assert users_frames(text).splitlines() == [
        "--- your code (most recent call last) ---",
        f'  File "{home_cell}", line 2, in fails', "    return check(x)",
        f'  File "{home_cell}", line 5, in check', "    raise ValueError(x)", "",
    ]


def notebook():
    """Cells as a user writes them: a loss branching on a tensor, a model function calling a
    helper of another cell that raises, then runs of both on a cluster."""
    cells = [
        """\
        import os
        import workbench as wb

        def branching_loss(y_true, y_pred):
            import keras
            import tensorflow as tf

            loss = keras.losses.sparse_categorical_crossentropy(y_true, y_pred)
            if tf.reduce_mean(loss) > 100.0:
                loss = loss / 100.0
            return loss

        print("cell file on disk:", os.path.exists(branching_loss.__code__.co_filename))""",
        """\
        def helper():
            raise ValueError("raised in the user's cell")""",
        """\
        def broken_model():
            return helper()""",
        """\
        with wb.Cluster(engines=4) as cluster:
            for strategy, ps in [("multi_worker_mirrored", 0), ("parameter_server", 1)]:
                run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), loss=branching_loss,
                                    strategy=strategy, workers=2, ps=ps, global_batch_size=64, steps=40,
                                    checkpoint_every=0, dashboard=False).wait(timeout=300)
                print(strategy, "trained to step", run.final_step)
            try:
                cluster.train(broken_model, wb.datasets.digits(), strategy="single", workers=1, steps=5,
                              checkpoint_every=0, dashboard=False).wait(timeout=300)
            except wb.EngineError as e:
                print(e)""",
    ]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(c)) for c in cells])


@pytest.mark.cluster
def test_a_notebook_cells_loss_trains_and_its_errors_show_the_cells_first(tmp_path):
    nb = notebook()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    out = ["".join(o.get("text", "") for o in cell.outputs) for cell in nb.cells]
    assert out[0] == "cell file on disk: False\n"
    printed = out[3].splitlines()
    # unconverted (its source unknown on the engines), the loss's `if` failed in the graph
    assert printed[:2] == ["multi_worker_mirrored trained to step 40", "parameter_server trained to step 40"]
    lines = printed[2:]
    error = "\n".join(lines)
    assert lines[0].startswith("local:0 (engine ") and lines[0].endswith(
        ") failed: ValueError: raised in the user's cell"), lines[0]
    assert lines[1:7] == [
        "",
        "--- your code (most recent call last) ---",
        "  Cell In[3], line 2, in broken_model",
        "    return helper()",
        "  Cell In[2], line 2, in helper",
        '    raise ValueError("raised in the user\'s cell")',
    ], error
    # the engine's own traceback shows the cells' lines (it showed '<dynamic-code>', no source)
    engines = error.split("--- engine traceback ---", 1)[1]
    assert 'raise ValueError("raised in the user\'s cell")' in engines and "return helper()" in engines, error
    assert "<dynamic-code>" not in error
