"""The quickstart in a real JupyterLab in a real browser (Debian's chromium, driven by
Playwright): the dashboard's loss chart gains points while training runs, its placement
view names the PS task, its Stop button stops the run. Then what a person sees once the
notebook has run, from the page's own layout: no throughput axis far above what the run
did, no task "lost" after a successful run, legends that cover no plot and are not
clipped, tick labels that neither run together nor touch their axis label. Then the
notebook loads in Notebook 7. Screenshots are saved under the test's tmp dir and listed
in the test output."""

import re

import numpy as np
import pytest
from browser_tools import accept_dialogs, open_idle, run_menu, wait_for

import workbench as wb

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


LAYOUT = """([scope, i, chart, legend]) => {
  const root = document.querySelectorAll(scope)[i];
  if (!root) return null;
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const legends = [...root.querySelectorAll(legend)].map(e => ({text: e.innerText, box: box(e),
                                                                clipped: e.scrollWidth > e.clientWidth + 1}));
  return {root: box(root), legends, charts: [...root.querySelectorAll(chart)].map(fig => ({
    plot: box(fig.querySelector('rect.plotarea_background')),
    inside: [...fig.querySelectorAll('.legendtext')].filter(t => t.textContent).map(t => box(t)),
    axes: [...fig.querySelectorAll('g.axis')].filter(a => a.querySelector('.axislabel')).map(a => ({
      label: a.querySelector('.axislabel').textContent, label_box: box(a.querySelector('.axislabel')),
      ticks: [...a.querySelectorAll('.tick text')].filter(t => t.textContent).map(t => [t.textContent, box(t)])}))}))};
}"""


def layout(page, scope, index, chart, legend):
    """Bounding boxes (left, top, right, bottom) of the charts of one widget: each plot area,
    its axes' labels and tick labels, and the legends."""
    return page.evaluate(LAYOUT, [scope, index, chart, legend])


def overlap(a, b, slack=0.5):
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack


def si(text):
    """A d3 "~s" tick label as a number: 24k -> 24000."""
    text = text.replace("\u2212", "-").replace(",", "")
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3, "\u00b5": 1e-6}.get(text[-1:], 1)
    return float(text[:-1] if scale != 1 else text) * scale


def check_legible(charts, legends, what):
    """Legends clear of every plot area and whole; tick labels apart; axis labels clear of ticks."""
    for chart in charts:
        assert not chart["inside"], f"{what}: a legend drawn inside the chart, over the curves"
        for legend in legends:
            assert not overlap(legend["box"], chart["plot"]), f"{what}: legend {legend} covers the plot {chart['plot']}"
        for axis in chart["axes"]:
            ticks = [b for _, b in axis["ticks"]]
            assert len(ticks) >= 2, f"{what}: axis {axis['label']!r} has ticks {axis['ticks']}"
            crowded = [(axis["ticks"][j][0], axis["ticks"][j + 1][0]) for j in range(len(ticks) - 1)
                       if overlap(ticks[j], ticks[j + 1], slack=-2)]  # less than 2 px apart
            assert not crowded, f"{what}: tick labels of {axis['label']!r} run together: {crowded}"
            touching = [t for t, b in axis["ticks"] if overlap(b, axis["label_box"])]
            assert not touching, f"{what}: the label {axis['label']!r} overlaps its tick labels {touching}"
    for legend in legends:
        assert not legend["clipped"], f"{what}: legend clipped: {legend}"


def test_quickstart_dashboard_in_jupyterlab_and_notebook7(lab, browser, tmp_path, capsys):
    base, token, server = lab
    shots = tmp_path / "screenshots"
    shots.mkdir()
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    try:
        _drive_quickstart(page, base, token, shots)
        _check_what_a_person_sees(page, tmp_path / "home", shots)
    except Exception:
        page.screenshot(path=str(shots / "lab-failure.png"), full_page=False)
        (shots / "lab-failure.txt").write_text(page.locator("body").inner_text())
        raise
    finally:
        with capsys.disabled():
            print("\nscreenshots for review:", *sorted(str(p) for p in shots.iterdir()), sep="\n  ")

    # Notebook 7 opens the same notebook
    nb7 = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    nb7.goto(f"{base}/notebooks/00_quickstart.ipynb?token={token}")
    nb7.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    wait_for(lambda: "Quickstart" in nb7.locator(".jp-Notebook").inner_text(), 60, lambda: "the quickstart in Notebook 7")
    nb7.screenshot(path=str(shots / "notebook7.png"))


FIND_DASHBOARD = """(run) => {
  const d = [...document.querySelectorAll('.wb-dashboard')].find(d => d.textContent.includes('workbench run ' + run));
  const text = s => { const e = d && d.querySelector(s); return e ? e.textContent : null; };
  if (d && text('.wb-status') !== null) return [text('.wb-status'), text('.wb-engines') || ''];
  const scroller = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
  scroller.scrollTop = d ? scroller.scrollTop : scroller.scrollTop + 400;
  return null;
}"""


def dashboard_status(page, run_id):
    """The status and engines lines of run ``run_id``'s dashboard: the notebook scrolled from
    its top, a screen part at a time, until JupyterLab has put that dashboard in the page."""
    page.evaluate("() => { document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer').scrollTop = 0; }")
    return wait_for(lambda: page.evaluate(FIND_DASHBOARD, run_id), 60,
                    lambda: f"the dashboard of run {run_id} in the page (first seen: {text_of(page, '.wb-dashboard', 0)[:80]!r})")


def _check_what_a_person_sees(page, home, shots):
    """Both dashboards and the comparison, once the notebook has run: the MWMS run finished,
    the PS run was stopped from its dashboard."""
    for i in range(2):
        dash = page.locator(".wb-dashboard").nth(i)
        dash.scroll_into_view_if_needed()
        dash.screenshot(path=str(shots / f"dashboard-{i}.png"))
        run_id = re.search(r"workbench run (\S+)", text_of(page, ".wb-dashboard", i)).group(1)
        if i == 0:
            first_run = run_id
        h = wb.history(run_id, home=home)
        median = float(np.median(h.examples_per_s))
        charts = layout(page, ".wb-dashboard", i, ".wb-throughput", ".wb-throughput-legend")["charts"]
        axis = next(a for a in charts[0]["axes"] if a["label"] == "examples/s")
        top = max(si(t) for t, _ in axis["ticks"])
        assert top <= 10 * median, f"run {run_id}: the throughput axis reaches {top:,.0f}, median {median:,.0f}"
        for chart, legend in ((".wb-loss", ".wb-loss-legend"), (".wb-throughput", ".wb-throughput-legend")):
            seen = layout(page, ".wb-dashboard", i, chart, legend)
            assert seen["legends"] and seen["charts"], f"dashboard {i}: {chart} and {legend} not found"
            check_legible(seen["charts"], seen["legends"], f"dashboard {i} {chart}")
    # JupyterLab renders only the cells near the view (its notebook is windowed): the first
    # dashboard, scrolled out of it by the second, is not in the page until it is back in view
    status, engines = dashboard_status(page, first_run)
    assert "finished" in status and "lost" not in engines and "failed" not in engines, (status, engines)
    compare = page.locator(".wb-compare").first
    compare.scroll_into_view_if_needed()
    compare.screenshot(path=str(shots / "compare.png"))
    seen = layout(page, ".wb-compare", 0, ".wb-compare-chart", ".wb-compare-legend")
    assert len(seen["charts"]) == 2, seen
    check_legible(seen["charts"], seen["legends"], "wb.compare")
    text = " ".join(legend["text"] for legend in seen["legends"])
    assert text.count("all-reduce, 2 workers") == 2 and text.count("parameter server, 1 worker") == 2, text
    assert all(legend["box"][2] <= seen["root"][2] + 1 for legend in seen["legends"]), seen


SAVED_DRAWINGS = """() => [...document.querySelectorAll('.jp-OutputArea-output img')]
  .filter(i => (i.getAttribute('src') || '').startsWith('data:image/svg+xml'))
  .map(i => [i.alt, i.naturalWidth, i.complete])"""


def _check_saved_outputs(page, shots):
    """The notebook as saved, before it runs (not trusted: JupyterLab sanitizes its HTML
    outputs): the dashboards' and the comparison's charts and placement are pictures, not
    their labels run together as text."""
    seen = wait_for(lambda: len(page.evaluate(SAVED_DRAWINGS)) >= 8 and page.evaluate(SAVED_DRAWINGS), 60,
                    lambda: f"the saved snapshots' drawings; found {page.evaluate(SAVED_DRAWINGS)}")
    page.screenshot(path=str(shots / "lab-saved.png"), full_page=False)
    assert all(width > 0 and complete for _, width, complete in seen), seen
    assert {alt for alt, _, _ in seen} >= {"loss chart", "throughput chart", "device placement", "loss against step"}
    text = page.locator(".jp-Notebook").inner_text()
    assert "Throughput per worker" not in text and "Lossstep" not in text, "a drawing's labels shown as text"


def _drive_quickstart(page, base, token, shots):
    open_idle(page, base, token, "00_quickstart.ipynb")
    _check_saved_outputs(page, shots)
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
    page.screenshot(path=str(shots / "lab-dashboard.png"), full_page=False)
    page.locator(".wb-stop").nth(1).click()
    wait_for(lambda: "stopped" in text_of(page, ".wb-status", 1), 60,
             lambda: f"the run to stop; status: {text_of(page, '.wb-status', 1)}")
    # then the rest of the notebook: the last cell stops the cluster
    page.locator(".jp-CodeCell", has_text="ps_run.wait()").first.locator(".jp-InputPrompt").click()
    run_menu(page, "Run Selected Cell and All Below")
    wait_for(lambda: accept_dialogs(page) and "stopped, 0 engines" in page.locator(".jp-Notebook").inner_text(), 120,
             lambda: "the notebook's last cell (cluster.stop())")
    page.screenshot(path=str(shots / "lab-after-stop.png"), full_page=False)



CELLS = (
    "import time\nimport workbench as wb\ncluster = wb.Cluster(engines=2).start()\n"
    "run = cluster.train(wb.models.mlp(), wb.datasets.digits(), strategy='multi_worker_mirrored', workers=2,\n"
    "                    steps=3000, global_batch_size=64, checkpoint_every=0)",
    "print('b')",
    "while run.step < 300 and not run.done:\n    time.sleep(0.05)\nprint('c')",
    "run.wait()\nprint('d')",
    "cluster.stop()\ncluster",
)

OUTPUTS = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')].map(c => {
  const out = c.querySelector('.jp-OutputArea');
  return {text: out ? out.innerText.trim() : '', dashboards: c.querySelectorAll('.wb-dashboard').length,
          status: [...c.querySelectorAll('.wb-status')].map(s => s.innerText).join(' '),
          charts: [...c.querySelectorAll('.jp-OutputArea-output img')].map(i => i.alt)};
})"""


def test_a_runs_outputs_stay_in_their_cells_in_jupyterlab(lab, browser, tmp_path, capsys):
    """A run started in one cell, two other cells executed while it trains, a cell that
    waits, in a real JupyterLab on ipykernel 7: the dashboard in the run's cell ends
    finished, each other cell shows its own output only, and the cell that waited ends with
    the run's final rendering (failed before: it showed only its own print)."""
    import nbformat

    base, token, _ = lab
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbformat.write(nb, tmp_path / "root" / "cells.ipynb")
    shot = tmp_path / "cells.png"
    # a window tall enough for all five cells: JupyterLab renders only the cells near the
    # view (a windowed notebook), and the outputs of cells out of it are not in the page
    page = browser.new_context(viewport={"width": 1400, "height": 4000}).new_page()
    try:
        open_idle(page, base, token, "cells.ipynb")
        page.locator(".jp-CodeCell").first.click()
        run_menu(page, "Run All Cells")
        seen = wait_for(lambda: accept_dialogs(page) and "stopped, 0 engines" in page.evaluate(OUTPUTS)[4]["text"]
                        and page.evaluate(OUTPUTS), 300, lambda: f"the last cell's output; seen {page.evaluate(OUTPUTS)}")
        page.screenshot(path=str(shot), full_page=True)
    finally:
        with capsys.disabled():
            print("\nscreenshot for review:", shot)
    run_cell, b, c, waited, stop = seen
    assert run_cell["dashboards"] == 1 and "finished · step 3000/3000" in run_cell["status"], run_cell
    assert (b["text"], c["text"]) == ("b", "c") and not b["dashboards"] and not c["dashboards"], (b, c)
    assert waited["text"].endswith("d") and "finished · step 3000/3000" in waited["text"], waited
    assert "loss chart" in waited["charts"] and not waited["dashboards"], waited
