"""What the browser tests share (test_browser, test_panel): where chromium and the
screenshots are, waiting, JupyterLab's menus and dialogs, starting a notebook's kernel. The
``lab`` and ``browser`` fixtures are in conftest.py."""

import json
import shutil
import socket
import urllib.request
from pathlib import Path

from checks import wait_for  # noqa: F401 - the browser tests and conftest take it from here

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = ROOT / "build" / "screenshots"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_menu(page, item):
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def accept_dialogs(page):
    """Accept JupyterLab's dialogs ("Select Kernel": the preferred one), as a user would.
    Always true, so it can lead a wait condition."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    if accept.count():
        accept.first.click()
    return True


def start_session(base, token, path):
    """Start the notebook's kernel through Jupyter's REST API; JupyterLab attaches to it."""
    body = json.dumps({"path": path, "type": "notebook", "name": path, "kernel": {"name": "python3"}}).encode()
    req = urllib.request.Request(f"{base}/api/sessions?token={token}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["kernel"]["id"]


def open_idle(page, base, token, path):
    """Open notebook ``path`` in JupyterLab with its kernel started (``start_session``) and
    wait until JupyterLab shows that kernel idle. Returns the kernel's id."""
    kernel = start_session(base, token, path)
    page.goto(f"{base}/lab/tree/{path}?token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
    wait_for(lambda: accept_dialogs(page) and "Idle" in str(page.locator(".jp-StatusBar-Widget").all_inner_texts()),
             120, lambda: "JupyterLab to show the idle kernel")
    return kernel
