"""Where the CLI finds its files: a source checkout when it runs in one, else the installed package.

`pip install .` (or the operator image) has no repository around it, so the samples and the trace
the demo replays ship as package data (`gem_operator/data/`, copies of `crds/samples/` and
`data/traces/` kept identical by a test), and `gemop crds` only reads or writes a repository's
`crds/` when there is one.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

PACKAGE_DATA = Path(str(resources.files("gem_operator") / "data"))
TRACE_NAME = "azure-llm-2023-code.csv"


def _is_checkout(root: Path) -> bool:
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return project.get("name") == "gem-operator" and (root / "crds").is_dir()


def checkout_root(cwd: Path | None = None) -> Path | None:
    """The gem-operator repository this runs in: the one the package was loaded from, else cwd's."""
    here = Path(__file__).resolve().parents[3]
    if _is_checkout(here):
        return here
    start = (cwd or Path.cwd()).resolve()
    for candidate in (start, *start.parents):
        if _is_checkout(candidate):
            return candidate
    return None


def samples_dir() -> Path:
    root = checkout_root()
    if root is not None and (root / "crds" / "samples").is_dir():
        return root / "crds" / "samples"
    return PACKAGE_DATA / "samples"


def trace_file() -> Path:
    root = checkout_root()
    if root is not None and (root / "data" / "traces" / TRACE_NAME).is_file():
        return root / "data" / "traces" / TRACE_NAME
    return PACKAGE_DATA / "traces" / TRACE_NAME
