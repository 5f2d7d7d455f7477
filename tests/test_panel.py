"""The Workbench panel (extensions/workbench-panel + workbench.lab) in a real JupyterLab in
Debian's chromium: a notebook starts a run; the panel lists it with a growing step count,
the cluster's engines with their roles, opens the run's notebook and TensorBoard, and stops
the run; after the kernel is gone the panel still shows the run, read from its records.
Screenshots go to build/screenshots/."""

import json
import os
import time
import urllib.error
import urllib.request

import nbformat
import pytest

from workbench.store import RunDir

from browser_tools import SHOTS, accept_dialogs, open_idle, run_menu, wait_for

pytestmark = pytest.mark.cluster

CELLS = [
    "import workbench as wb\ncluster = wb.Cluster(engines=2).start()",
    "run = cluster.train(wb.models.mlp((64, 32)), wb.datasets.digits(), strategy='multi_worker_mirrored',\n"
    "                    workers=2, global_batch_size=128, steps=1_000_000)",
]


def panel_runs(page):
    return page.evaluate("""() => [...document.querySelectorAll('#workbench-panel .wb-run')].map(r => ({
        id: r.dataset.runId, status: r.querySelector('.wb-run-status').innerText,
        step: r.querySelector('.wb-run-step').innerText, text: r.innerText}))""")


def the_run(page):
    runs = panel_runs(page)
    return runs[0] if runs else None


def step_of(run):
    return int(run["step"].split()[1])


def where(page):
    """The page's address, or '' while it is navigating (the popup starts at about:blank)."""
    from playwright.sync_api import Error

    try:
        return page.evaluate("location.href")
    except Error:
        return ""


def api(base, token, path, method="GET"):
    sep = "&" if "?" in path else "?"
    req = urllib.request.Request(f"{base}/workbench/api/{path}{sep}token={token}", method=method,
                                 data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_panel_lists_stops_and_remembers_a_run(lab, browser, tmp_path):
    base, token, server = lab
    root = tmp_path / "root"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbformat.write(nb, root / "panel_run.ipynb")
    page = browser.new_context(viewport={"width": 1500, "height": 950}).new_page()
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        _drive(page, base, token)
    except Exception:
        page.screenshot(path=str(SHOTS / "panel-failure.png"))
        (SHOTS / "panel-failure.txt").write_text(page.locator("body").inner_text())
        raise


BUTTONS = """() => {
  const panel = document.querySelector('#workbench-panel');
  const bare = panel.appendChild(document.createElement('button'));  // the browser's own look
  const look = b => { const s = getComputedStyle(b); return {text: b.innerText, background: s.backgroundColor,
                      border: `${s.borderTopStyle} ${s.borderTopWidth}`, font: s.fontFamily, height: b.offsetHeight}; };
  const out = {bare: look(bare), font: getComputedStyle(panel).fontFamily,
               buttons: [...panel.querySelectorAll('.wb-run button')].map(look)};
  bare.remove();
  return out;
}"""


def rgb(css):
    return [int(v) for v in css[css.index("(") + 1:css.index(")")].split(",")[:3]]


def _check_buttons(page):
    """The run's buttons are JupyterLab's styled buttons, not the browser's bare ones: the
    panel's font, no bevelled border, Stop in red and the others in the theme's blue."""
    seen = page.evaluate(BUTTONS)
    buttons, bare = seen["buttons"], seen["bare"]
    assert [b["text"] for b in buttons] == ["Stop", "Stacks", "Console", "Notebook", "TensorBoard"], seen
    for b in buttons:
        assert b["font"] == seen["font"] and b["border"] != bare["border"] and b["background"] != bare["background"], seen
    (r, g, bl), others = rgb(buttons[0]["background"]), [rgb(b["background"]) for b in buttons[1:]]
    assert r > 2 * max(g, bl) and all(c[2] > 1.5 * max(c[:2]) for c in others), seen


def _drive(page, base, token):
    session = open_idle(page, base, token, "panel_run.ipynb")
    page.locator(".jp-NotebookPanel .jp-Cell").first.click()
    run_menu(page, "Run All Cells")

    # the panel, from the left sidebar
    page.locator('.jp-SideBar [data-id="workbench-panel"]').click()
    page.wait_for_selector("#workbench-panel .wb-panel-body h3", timeout=30_000)
    running = wait_for(lambda: accept_dialogs(page) and (r := the_run(page)) and r["status"] == "running"
                       and step_of(r) > 0 and r, 240, lambda: f"a running run in the panel: {panel_runs(page)}")
    assert "multi_worker_mirrored" in running["text"] and "2 workers" in running["text"]
    assert "/ 1000000" in running["step"]
    later = wait_for(lambda: (r := the_run(page)) and step_of(r) > step_of(running) + 50 and r, 60,
                     lambda: f"the step count to grow past {step_of(running)}: {panel_runs(page)}")
    assert later["id"] == running["id"] and "loss" in later["text"] and "steps/s" in later["text"]
    engines = page.locator("#workbench-panel .wb-engines").inner_text()
    assert "worker:0" in engines and "worker:1" in engines and "CPU" in engines
    assert page.locator("#workbench-panel .wb-run .wb-spark polyline").count() == 1
    if page.locator(".jp-toast-button", has_text="No").count():  # JupyterLab's news question, out of the picture
        page.locator(".jp-toast-button", has_text="No").first.click()
        wait_for(lambda: not page.locator(".Toastify__toast:visible").count(), 10, lambda: "the toast to go")
    page.screenshot(path=str(SHOTS / "lab-panel.png"))
    _check_buttons(page)

    # "Notebook" brings the notebook that started the run to the front
    page.locator(".lm-MenuBar-itemLabel", has_text="File").first.click()  # a launcher in front of it
    page.locator(".lm-Menu-itemLabel", has_text="New Launcher").first.click()
    wait_for(lambda: page.locator(".jp-Launcher:visible").count() and not page.locator(".jp-NotebookPanel:visible").count(),
             30, lambda: "a launcher in front of the notebook")
    page.locator("#workbench-panel .wb-run button[data-action=notebook]").first.click()
    wait_for(lambda: page.locator(".jp-NotebookPanel:visible").count() == 1, 30, lambda: "the notebook in front")

    # "TensorBoard" starts TensorBoard on the run's logs and opens it
    with page.context.expect_page(timeout=90_000) as popup:
        page.locator("#workbench-panel .wb-run button[data-action=tensorboard]").first.click()
    board = popup.value
    board.wait_for_load_state(timeout=90_000)
    # TensorBoard imports TensorFlow before it serves: 90 s was not enough once, beside the
    # other test worker's runs (its page came up after the deadline)
    wait_for(lambda: where(board).startswith("http://127.0.0.1:") and "TensorBoard" in board.title(),
             240, lambda: f"TensorBoard's page, at {where(board)}: {board.title()!r}")
    board.close()

    # "Stacks": every task's state and where it is, its stacks folded under it, read by the
    # kernel that watches the run while it trains
    page.locator("#workbench-panel .wb-run button[data-action=stacks]").first.click()
    tasks = page.locator("#workbench-panel .wb-run-stacks .wb-stacks-task")
    wait_for(lambda: tasks.count() == 2, 30,
             lambda: f"a line per task: {page.locator('#workbench-panel .wb-run').first.inner_text()!r}")
    lines = [tasks.nth(i).locator("summary").inner_text() for i in range(2)]
    assert [line.split()[0] for line in lines] == ["worker:0", "worker:1"], lines
    assert all(" answered " in line and "idle" not in line for line in lines), lines  # in its step
    tasks.first.locator("summary").click()
    text = tasks.first.locator("pre").inner_text()
    assert "--- worker:0 (engine" in text and "Thread 'MainThread' (main):" in text and 'File "' in text, text
    page.screenshot(path=str(SHOTS / "lab-panel-stacks.png"))
    page.locator("#workbench-panel .wb-run button[data-action=close-stacks]").click()
    wait_for(lambda: tasks.count() == 0, 10, lambda: "the stacks to close")

    # "Console": a console on the notebook's kernel, its prompt holding %%wb on worker:0 RUN;
    # what the user types under it runs inside that engine while it trains
    page.locator("#workbench-panel .wb-run button[data-action=console]").first.click()
    prompt = page.locator(".jp-CodeConsole-promptCell .jp-InputArea-editor").last
    wait_for(lambda: prompt.count() and f"%%wb on worker:0 {running['id']}" in prompt.inner_text(), 60,
             lambda: f"the console's prompt: {page.locator('.jp-CodeConsole').last.inner_text()!r}")
    prompt.click()
    page.keyboard.press("Control+End")
    page.keyboard.type("print(task.name, int(step.numpy()) > 0)")
    page.keyboard.press("Shift+Enter")
    outputs = page.locator(".jp-CodeConsole-content .jp-OutputArea-output")
    wait_for(lambda: outputs.count() and "worker:0 True" in outputs.last.inner_text(), 60,
             lambda: f"the cell's output from worker:0: {page.locator('.jp-CodeConsole').last.inner_text()!r}")
    page.screenshot(path=str(SHOTS / "lab-panel-console.png"))

    # "Stop" stops it
    page.locator("#workbench-panel .wb-run button[data-action=stop]").first.click()
    # the panel's answer to the button shows, and goes after 10 s
    message = page.locator("#workbench-panel .wb-message")
    wait_for(lambda: message.inner_text() == f"Asked run {running['id']} to stop.", 15,
             lambda: f"the panel's answer: {message.inner_text()!r}")
    stopped = wait_for(lambda: (r := the_run(page)) and r["status"] == "stopped" and r, 90,
                       lambda: f"the run to stop: {panel_runs(page)}")
    assert step_of(stopped) < 1_000_000
    wait_for(lambda: message.inner_text() == "", 30, lambda: f"the message to go: {message.inner_text()!r}")

    # with its kernel gone, the run is still listed, read from its run directory
    urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{session}?token={token}", method="DELETE"),
                           timeout=60)
    wait_for(lambda: not page.locator("#workbench-panel .wb-cluster").count(), 60,
             lambda: "the cluster to leave the panel with its kernel")
    after = the_run(page)
    assert after["id"] == running["id"] and after["status"] == "stopped" and step_of(after) == step_of(stopped)
    state = api(base, token, "state")
    assert state["runs"][0]["notebook"] == "panel_run.ipynb" and state["clusters"] == []


def test_panel_api_refuses_bad_requests(lab, tmp_path):
    """Bad run ids; and stacks, read by the kernel that watches the run: a run recorded as
    running (its kernel's pid alive) with no watcher gets a 504 saying so after ``wait`` s,
    leaving no request behind; a finished run's a 409; a bad ``wait`` a 400 naming it."""
    base, token, _ = lab
    for path, code in [("runs/..%2Fetc/stop", 400), ("runs/%2E%2E/stop", 400), ("runs/no-such-run/stop", 404), ("runs/no-such-run/tensorboard", 404),
                       ("runs/no-such-run/stacks", 404)]:
        with pytest.raises(urllib.error.HTTPError) as e:
            api(base, token, path, method="POST")
        assert e.value.code == code, (path, e.value.code)
        assert "run" in json.loads(e.value.read())["message"]
    runs = tmp_path / "home" / "runs"
    record = {"run_id": "", "strategy": "multi_worker_mirrored", "workers": 2, "ps": 0, "steps": 10,
              "started": time.time(), "kernel_pid": os.getpid(), "tasks": []}
    live, done = RunDir(runs / "unwatched"), RunDir(runs / "finished")
    live.write_run(dict(record, run_id="unwatched"))
    done.write_run(dict(record, run_id="finished"))
    done.write_result({"final_step": 10, "stopped": False})
    for path, code, said in [("runs/unwatched/stacks?wait=1", 504, "no kernel answered for run unwatched within 1 s"),
                             ("runs/finished/stacks", 409, "run finished is finished, not running"),
                             ("runs/unwatched/stacks?wait=soon", 400, "wait='soon': expected seconds")]:
        with pytest.raises(urllib.error.HTTPError) as e:
            api(base, token, path, method="POST")
        assert e.value.code == code and said in json.loads(e.value.read())["message"], path
    assert not live.stacks_request_file.exists()
