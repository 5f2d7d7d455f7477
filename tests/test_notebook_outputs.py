"""What a notebook's cells receive from a run, message by message, in a real IPython kernel
(ipykernel 7): the cell that waits for a run ends with its final static rendering as its
own output, before it goes idle; nothing of the run lands in the cells run meanwhile or
after; a run's thread writes to the cell that started it. And what a test compares of a
run: the same line for every seeded execution of a deterministic strategy."""

import time

import pytest
from jupyter_client.manager import start_new_kernel

import workbench as wb
from workbench.kernel.views.checks import check_line

pytestmark = pytest.mark.cluster
DIGITS = wb.datasets.digits()


class Kernel:
    """A real kernel that runs cells one after the other and keeps what each received."""

    def __init__(self):
        self.km, self.kc = start_new_kernel(kernel_name="python3")
        self.ids = {}  # cell name -> msg_id of its execute_request
        self.got = []  # (cell name or None, msg_type, content), in arrival order

    def run(self, name, code, timeout=300):
        self.ids[name] = self.kc.execute(code)
        self.drain(lambda m: m["parent_header"].get("msg_id") == self.ids[name] and m["msg_type"] == "status"
                   and m["content"]["execution_state"] == "idle", timeout)
        errors = [c for n, t, c in self.got if n == name and t == "error"]
        assert not errors, f"cell {name}: {errors[0]['ename']}: {errors[0]['evalue']}"

    def drain(self, until, timeout):
        end = time.monotonic() + timeout
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except Exception:  # queue.Empty
                assert until is None or time.monotonic() < end, f"the kernel did not finish in {timeout} s"
                if until is None:
                    return
                continue
            parent = msg["parent_header"].get("msg_id")
            name = next((n for n, i in self.ids.items() if i == parent), None)
            self.got.append((name, msg["msg_type"], msg["content"]))
            if until is not None and until(msg):
                return

    def outputs(self, name):
        """What cell ``name`` shows: its streams' text and each display's text/plain."""
        out = []
        for n, kind, content in self.got:
            if n == name and kind == "stream":
                out.append(("stream", content["text"]))
            elif n == name and kind in ("display_data", "update_display_data", "execute_result"):
                out.append((kind, content["data"].get("text/plain", "")))
        return out

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


@pytest.fixture
def kernel():
    k = Kernel()
    yield k
    k.close()


def test_the_cell_that_waits_shows_the_finished_run_and_other_cells_only_their_own(kernel):
    kernel.run("A", "import workbench as wb\ncluster = wb.Cluster(engines=2).start()\n"
                    "run = cluster.train(wb.models.mlp(), wb.datasets.digits(), strategy='multi_worker_mirrored', "
                    "workers=2, steps=400, global_batch_size=64, checkpoint_every=0)")
    kernel.run("B", "print('b')")
    kernel.run("C", "import time\nwhile run.step < 100 and not run.done:\n    time.sleep(0.05)\nprint('c')")
    kernel.run("D", "run.wait()\nprint('d')")
    kernel.run("E", "cluster.stop()")
    kernel.drain(None, 0)  # what is left

    [(kind, dashboard)] = kernel.outputs("A")
    assert kind == "display_data" and dashboard.startswith("<workbench dashboard: run "), kernel.outputs("A")
    assert kernel.outputs("B") == [("stream", "b\n")] and kernel.outputs("C") == [("stream", "c\n")]
    # the dashboard's last update (a display's update goes with the running cell) before the
    # cell's own final rendering, all before it went idle: nbval and nbclient see both
    d = kernel.outputs("D")
    kinds = [kind for kind, _ in d]
    assert kinds[-2:] == ["display_data", "stream"] and set(kinds[:-2]) == {"update_display_data"}, d
    assert d[-2][1].startswith("<workbench run ") and "finished at step 400/400, final loss" in d[-2][1], d
    assert d[-1][1] == "d\n"
    final = [c for n, t, c in kernel.got if n == "D" and t == "display_data"][-1]["data"]["text/html"]
    assert 'data-wb-check="workbench run ' in final and 'alt="loss chart"' in final
    update = [c for n, t, c in kernel.got if n == "D" and t == "update_display_data"][-1]["data"]["text/html"]
    assert "its final rendering is in the output of the cell that waited for it" in update
    assert kernel.outputs("E") == [] and [t for n, t, _ in kernel.got if n is None and "display" in t] == []


def test_a_runs_thread_writes_to_the_cell_that_started_the_run(kernel):
    """ipykernel 7 sends a thread's print with the parent of the cell running at that
    moment; the thread that enters its cell (as a run's watcher and dashboard do) writes
    there instead."""
    kernel.run("F", "import threading\nfrom workbench.kernel.runs.watcher import current_cell, enter_cell\n"
                    "cell, asked = current_cell(), threading.Event()\n"
                    "def speak(enter):\n    if enter:\n        enter_cell(cell)\n    asked.wait()\n"
                    "    print('from a thread that entered its cell:', enter)\n"
                    "threads = [threading.Thread(target=speak, args=(e,)) for e in (True, False)]\n"
                    "for t in threads:\n    t.start()")
    kernel.run("G", "asked.set()\nfor t in threads:\n    t.join()")
    assert kernel.outputs("F") == [("stream", "from a thread that entered its cell: True\n")]
    assert kernel.outputs("G") == [("stream", "from a thread that entered its cell: False\n")]


def test_seeded_runs_check_the_same_line_where_the_strategy_is_deterministic(cluster4):
    """What a notebook test compares of a run (``data-wb-check``): with its numbers for a
    deterministic strategy (every step's loss identical here), without them for several
    parameter-server workers, whose numbers differ between executions."""
    def twice(**kw):
        runs = [cluster4.train(wb.models.mlp(hidden=(64, 32)), DIGITS, global_batch_size=128, steps=200, seed=0,
                               learning_rate=0.1, checkpoint_every=0, dashboard=False, **kw).wait(timeout=300)
                for _ in range(2)]
        return runs, [check_line(r).split(": ", 1)[1] for r in runs]

    (a, b), lines = twice(strategy="multi_worker_mirrored", workers=2)
    assert lines[0] == lines[1] and ", final loss " in lines[0] and ", test accuracy " in lines[0], lines
    assert list(a.history.loss) == list(b.history.loss)
    _, lines = twice(strategy="parameter_server", workers=2, ps=1)
    assert lines[0] == lines[1] == ("parameter_server workers=2 ps=1, finished at step 200/200 (its numbers vary "
                                    "between executions: 2 workers update in no fixed order)"), lines
