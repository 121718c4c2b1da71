"""Running the kopf operator: in the foreground (`gemop run`) or in a thread (demo, sim, tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import kopf


@dataclass(frozen=True)
class OperatorOptions:
    """What `kopf run` would take on its command line."""

    namespaces: Sequence[str] = ()
    clusterwide: bool = False
    standalone: bool = False
    peering_name: str | None = None
    liveness_endpoint: str | None = None
    priority: int = 0
    extra: dict[str, str] = field(default_factory=dict)


def _handlers() -> kopf.OperatorRegistry:
    # Imported lazily so that `gemop crds` and friends never import the handlers.
    from gem_operator.controllers import REGISTRY

    return REGISTRY


def run_foreground(opts: OperatorOptions) -> None:
    """Block running the operator until SIGINT/SIGTERM, exactly like `kopf run`."""
    kopf.run(
        registry=_handlers(),
        standalone=opts.standalone,
        peering_name=opts.peering_name,
        liveness_endpoint=opts.liveness_endpoint,
        clusterwide=opts.clusterwide,
        namespaces=list(opts.namespaces),
        priority=opts.priority,
    )


class OperatorThread:
    """The operator on its own event loop in a daemon thread, stoppable from the caller."""

    def __init__(self, opts: OperatorOptions) -> None:
        self._opts = opts
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="gem-operator", daemon=True)
        self.error: BaseException | None = None

    def _main(self) -> None:
        registry = _handlers()
        try:
            asyncio.run(
                kopf.operator(
                    registry=registry,
                    standalone=self._opts.standalone,
                    peering_name=self._opts.peering_name,
                    liveness_endpoint=self._opts.liveness_endpoint,
                    clusterwide=self._opts.clusterwide,
                    namespaces=list(self._opts.namespaces),
                    priority=self._opts.priority,
                    stop_flag=self._stop,
                    ready_flag=self._ready,
                )
            )
        except BaseException as exc:  # reported to the caller, who owns the process
            self.error = exc
            self._ready.set()

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"operator not ready within {timeout} s")
        if self.error is not None:
            raise RuntimeError(f"operator failed to start: {self.error}") from self.error

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
