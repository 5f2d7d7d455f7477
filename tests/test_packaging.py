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
