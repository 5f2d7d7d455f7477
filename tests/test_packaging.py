"""pyproject.toml and environment.yml install the same set of packages."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(req):
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    wanted |= {_name(r) for r in project["optional-dependencies"]["test"]}
    listed, section = set(), None
    for line in (ROOT / "environment.yml").read_text().splitlines():
        line = line.split("#")[0].rstrip()
        if line and not line.startswith(" "):
            section = line.rstrip(":")
        item = line.strip()
        if section == "dependencies" and item.startswith("- ") and not item.startswith("- -e") and ":" not in item:
            listed.add(_name(item[2:]))
    listed -= {"python", "pip"}
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"


def test_the_panel_is_installed_prebuilt_and_enabled():
    """The README's install command puts the prebuilt panel and its server extension in
    place (no Node.js); the committed build is the one of the committed source."""
    import json
    import subprocess
    import sys

    lab = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], capture_output=True, text=True)
    assert re.search(r"workbench-panel v\S+ \S*enabled\S* \S*OK", lab.stdout + lab.stderr), lab.stdout + lab.stderr
    server = subprocess.run([sys.executable, "-m", "jupyter", "server", "extension", "list"], capture_output=True, text=True)
    assert re.search(r"workbench\.lab \S*enabled", server.stdout + server.stderr), server.stdout + server.stderr
    source = json.loads((ROOT / "extensions" / "workbench-panel" / "package.json").read_text())
    built = json.loads((ROOT / "workbench" / "labextension" / "package.json").read_text())
    assert built["name"] == source["name"] and built["version"] == source["version"]
    bundle = "".join(p.read_text() for p in (ROOT / "workbench" / "labextension" / "static").glob("*.js"))
    for needle in ("wb-run-buttons", "docmanager:open", '"workbench","api"'):
        assert needle in bundle, f"{needle!r} is not in the built panel: rebuild it (extensions/workbench-panel: npm run build)"


def test_pyprojects_pointers_name_sections_that_exist():
    """A comment's "(see FILE, "SECTION")" leads to a heading of that file."""
    text = (ROOT / "pyproject.toml").read_text()
    pointers = re.findall(r'\(see ([^,()]+), "([^"]+)"\)', text)
    assert pointers, "no pointer found: the pattern no longer matches how pyproject.toml writes them"
    for path, section in pointers:
        assert (ROOT / path).is_file(), f"pyproject.toml points to {path}, which does not exist"
        headings = re.findall(r"^#+ (.+?)\s*$", (ROOT / path).read_text(), re.M)
        assert section in headings, f"pyproject.toml points to {path}'s section {section!r}; its headings: {headings}"
