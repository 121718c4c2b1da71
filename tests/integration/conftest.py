"""The real kopf operator, in a thread, against the embedded cluster over HTTP."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Read by gem_operator.controllers at import: resync fast so tests do not wait for timers.
os.environ.setdefault("GEM_RESYNC_SECONDS", "1")

from gem_operator.api.crd import gem_crds
from gem_operator.cli.operator import OperatorOptions, OperatorThread
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.drivers.demo import PEERING_NAME, peering_object
from gem_testbed.kubelets.lifecycle import LifecycleConfig

FAST = LifecycleConfig(start_delay=0.05, ready_delay=0.05)


EventWaiter = Callable[[set[tuple[str, str]]], set[tuple[str, str]]]


@pytest.fixture
def wait_for_events(cluster: EmbeddedCluster) -> EventWaiter:
    """Wait until Events with these (object name, reason) pairs exist in `default`; returns every pair seen.

    kopf posts Events from a background queue, so they can land after the status write a test
    waited for.
    """

    def wait(wanted: set[tuple[str, str]]) -> set[tuple[str, str]]:
        seen: set[tuple[str, str]] = set()

        def posted() -> bool:
            seen.clear()
            seen.update((e["involvedObject"]["name"], e["reason"]) for e in cluster.events("default"))
            return wanted <= seen

        try:
            cluster.wait_for(posted, timeout=10.0)
        except TimeoutError:
            pytest.fail(f"Events {sorted(wanted - seen)} not posted within 10 s; posted: {sorted(seen)}")
        return seen

    return wait


@pytest.fixture
def fleet() -> str:
    return "demo"


@pytest.fixture
def cluster(fleet: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(fleet, list(gem_crds().values()), lifecycle=FAST) as c:
        monkeypatch.setenv("KUBECONFIG", str(c.write_kubeconfig(tmp_path / "kubeconfig")))
        c.apply(peering_object(PEERING_NAME, "default"))
        yield c


@pytest.fixture
def start_operator(cluster: EmbeddedCluster) -> Iterator[type[OperatorThread]]:
    started: list[OperatorThread] = []

    class Started(OperatorThread):
        def __init__(self) -> None:
            super().__init__(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
            started.append(self)
            self.start()

    yield Started
    for op in started:
        op.stop()


@pytest.fixture
def operator(start_operator: type[OperatorThread]) -> OperatorThread:
    return start_operator()  # type: ignore[call-arg]
