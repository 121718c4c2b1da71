"""What other distributions add to `gemop`, found through entry points, never imported by name.

The test rig (`gem_testbed`, installed with the `testbed` extra) adds the subcommands `demo`,
`sim` and `loadtest` (group `gemop.commands`: a callable that adds its subparser) and the PNG of
`gemop replay --plot` (group `gemop.plotters`). The operator's image is built without the extra,
so the operator must not depend on it: it asks the installed metadata, and a missing extra is one
line naming what to install instead of a traceback.

A source checkout whose editable install predates an entry point (the metadata is written at
install time) would not see it; there the checkout's own `pyproject.toml`, where the entry points
are declared, is read as well.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

COMMANDS = "gemop.commands"
PLOTTERS = "gemop.plotters"
TESTBED_INSTALL = "pip install 'gem-operator[testbed]'"


def _checkout_entry_points(group: str) -> dict[str, str]:
    """The entry points of `group` declared by the checkout this package was loaded from, if any."""
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    if project.get("name") != "gem-operator":
        return {}
    declared = (project.get("entry-points") or {}).get(group) or {}
    return {str(name): str(value) for name, value in declared.items()}


def declared(group: str) -> dict[str, str]:
    """Entry point name -> `module:attribute`, from the installed metadata, then the checkout."""
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=group)}
    for name, value in _checkout_entry_points(group).items():
        found.setdefault(name, value)
    return found


def load(group: str, name: str) -> tuple[Any, str | None]:
    """(the object, None), or (None, why it is unavailable) when no distribution provides it.

    A module missing outside `gem_operator` (the testbed or one of its dependencies), or one that
    refuses to load (kmock at another version than the pin), means the extra is not installed as
    declared: the operator's own commands must still work then. A module missing inside
    `gem_operator` is a bug and propagates.
    """
    value = declared(group).get(name)
    if value is None:
        return None, f"needs the testbed extra; install it: {TESTBED_INSTALL}"
    try:
        return importlib.metadata.EntryPoint(name=name, value=value, group=group).load(), None
    except ImportError as exc:
        missing = isinstance(exc, ModuleNotFoundError)
        if missing and (exc.name or "").partition(".")[0] == "gem_operator":
            raise
        why = f"no module {exc.name!r}" if missing else str(exc)
        return None, f"needs the testbed extra ({why}); install it: {TESTBED_INSTALL}"
