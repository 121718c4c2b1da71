"""Where the control plane's binaries are: the cache that scripts/control-plane/build.sh fills.

The build script writes `components.tsv` into the cache after every run, one row per component
(name, version, status, path, build seconds, note). Reading it, rather than guessing paths, keeps
the pinned versions in one place (the go.mod files beside the script) and lets callers say exactly
which binary is missing and why.
"""

from __future__ import annotations

import csv
import os
import pathlib
from collections.abc import Iterable
from dataclasses import dataclass

CACHE_ENV = "GEM_CONTROL_PLANE_CACHE"
SUMMARY_NAME = "components.tsv"
BUILD_SCRIPT = "scripts/control-plane/build.sh"

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
KWOK = "kwok"
KUEUE = "kueue"
HELM = "helm"
# What `ControlPlane` starts; Kueue and helm are optional extras.
CORE = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, KWOK)


class MissingBinaryError(RuntimeError):
    """A component's binary is not in the cache; the message names it and says how to build it."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"missing control-plane binary {name!r}: {reason} (build it with {BUILD_SCRIPT})")
        self.name = name
        self.reason = reason


@dataclass(frozen=True)
class Component:
    """One row of the build summary."""

    name: str
    version: str
    status: str
    path: pathlib.Path


def cache_dir() -> pathlib.Path:
    """The cache the build script fills; `$GEM_CONTROL_PLANE_CACHE` overrides the default."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return pathlib.Path(configured)
    return pathlib.Path.home() / ".cache" / "gem-operator" / "control-plane"


def read_summary(cache: pathlib.Path | None = None) -> dict[str, Component]:
    """The build summary's rows by component name; empty when the script never ran."""
    summary = (cache or cache_dir()) / SUMMARY_NAME
    if not summary.is_file():
        return {}
    with summary.open(newline="") as handle:
        rows = csv.DictReader(handle, delimiter="\t")
        return {
            row["component"]: Component(row["component"], row["version"], row["status"], pathlib.Path(row["path"]))
            for row in rows
        }


def find_binary(name: str, cache: pathlib.Path | None = None) -> pathlib.Path:
    """The path of an available, executable binary, or `MissingBinaryError` saying why not."""
    root = cache or cache_dir()
    component = read_summary(root).get(name)
    if component is None:
        raise MissingBinaryError(name, f"no row for it in {root / SUMMARY_NAME}")
    if component.status != "available":
        raise MissingBinaryError(name, f"the last build left it {component.status} (version {component.version})")
    if not os.access(component.path, os.X_OK):
        raise MissingBinaryError(name, f"{component.path} is not an executable file")
    return component.path


def find_binaries(names: Iterable[str], cache: pathlib.Path | None = None) -> dict[str, pathlib.Path]:
    """Paths of all `names`; the first missing one raises `MissingBinaryError`."""
    return {name: find_binary(name, cache) for name in names}


def missing_binaries(names: Iterable[str], cache: pathlib.Path | None = None) -> list[MissingBinaryError]:
    """One error per binary of `names` that cannot be used (empty when all are there)."""
    errors: list[MissingBinaryError] = []
    for name in names:
        try:
            find_binary(name, cache)
        except MissingBinaryError as error:
            errors.append(error)
    return errors
