"""The quickstart in a real JupyterLab in a real browser (Debian's chromium, driven by
Playwright): the dashboard's loss chart gains points while training runs, its placement
view names the PS task, its Stop button stops the run. Then the notebook loads in
Notebook 7. A screenshot is saved under build/screenshots/."""

import pytest
from browser_tools import SHOTS, accept_dialogs, run_menu, start_session, wait_for

pytestmark = pytest.mark.cluster


def loss_points(page, index):
    """Points on the loss lines of the index-th dashboard."""
    return page.evaluate(
        """i => { const d = document.querySelectorAll('.wb-dashboard')[i];
                  if (!d) return -1;
                  return [...d.querySelectorAll('.wb-loss path.line')]
                     .map(p => ((p.getAttribute('d') || '').match(/L/g) || []).length).reduce((a, b) => a + b, 0); }""",
        index)


def text_of(page, selector, index):
    return page.evaluate("([s, i]) => { const e = document.querySelectorAll(s)[i]; return e ? e.innerText : ''; }",
                         [selector, index])


def test_quickstart_dashboard_in_jupyterlab_and_notebook7(lab, browser, tmp_path):
    base, token, server = lab
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        _drive_quickstart(page, base, token)
    except Exception:
        page.screenshot(path=str(SHOTS / "lab-failure.png"), full_page=False)
        (SHOTS / "lab-failure.txt").write_text(page.locator("body").inner_text())
        raise

    # Notebook 7 opens the same notebook
    nb7 = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    nb7.goto(f"{base}/notebooks/00_quickstart.ipynb?token={token}")
    nb7.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    wait_for(lambda: "Quickstart" in nb7.locator(".jp-Notebook").inner_text(), 60, lambda: "the quickstart in Notebook 7")
    nb7.screenshot(path=str(SHOTS / "notebook7.png"))


def _drive_quickstart(page, base, token):
    start_session(base, token, "00_quickstart.ipynb")
    page.goto(f"{base}/lab/tree/00_quickstart.ipynb?token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)

    wait_for(lambda: accept_dialogs(page) and "Idle" in page.locator(".jp-StatusBar-Widget").all_inner_texts().__str__(),
             120, lambda: "JupyterLab to show the idle kernel")
    # run every cell above the prose after the PS run's cell: the run starts and the kernel
    # is free again, so the dashboard's Stop button is handled at once
    page.locator(".jp-MarkdownCell", has_text="Asynchronous training has no global step").first.click()
    run_menu(page, "Run All Above Selected Cell")

    # the parameter-server run's dashboard is the second one in the notebook
    wait_for(lambda: accept_dialogs(page) and "running" in text_of(page, ".wb-status", 1), 240,
             lambda: f"the PS run's dashboard; statuses: {[text_of(page, '.wb-status', i) for i in range(2)]}")
    first = wait_for(lambda: accept_dialogs(page) and loss_points(page, 1) > 0 and loss_points(page, 1), 60, lambda: "loss points")
    grown = wait_for(lambda: loss_points(page, 1) > first and loss_points(page, 1), 60,
                     lambda: f"more loss points than {first} (status {text_of(page, '.wb-status', 1)})")
    assert "running" in text_of(page, ".wb-status", 1), "the chart must grow while the run trains"
    assert grown > first
    wait_for(lambda: "ps:0" in text_of(page, ".wb-placement", 1), 60, lambda: "ps:0 in the placement view")
    page.locator(".wb-dashboard").nth(1).scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "lab-dashboard.png"), full_page=False)
    page.locator(".wb-stop").nth(1).click()
    wait_for(lambda: "stopped" in text_of(page, ".wb-status", 1), 60,
             lambda: f"the run to stop; status: {text_of(page, '.wb-status', 1)}")
    # then the rest of the notebook: the last cell stops the cluster
    page.locator(".jp-CodeCell", has_text="ps_run.wait()").first.locator(".jp-InputPrompt").click()
    run_menu(page, "Run Selected Cell and All Below")
    wait_for(lambda: accept_dialogs(page) and "stopped, 0 engines" in page.locator(".jp-Notebook").inner_text(), 120,
             lambda: "the notebook's last cell (cluster.stop())")
    page.screenshot(path=str(SHOTS / "lab-after-stop.png"), full_page=False)

