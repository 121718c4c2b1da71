"""Running the kopf operator: in the foreground (`gemop run`) or in a thread (demo, sim, tests).

High availability is kopf peering: every replica writes a record with its priority to a peering
object, and a replica pauses while it sees a live peer of higher *or equal* priority. Equal
priorities therefore pause everyone, so each replica needs its own: ``default_priority`` derives one
from the pod's UID (the chart passes it through the downward API) or, outside a pod, picks one at
random. The highest priority acts; the others wait for its record to expire (see
``PEERING_LIFETIME`` in ``controllers.settings``) or to be withdrawn on SIGTERM.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import kopf

# kopf compares priorities as ints; keep them positive and within 31 bits for any JSON reader.
PRIORITY_MAX = 2**31 - 1
# Set by the chart from the downward API (metadata.uid): a stable, distinct priority per pod.
POD_UID_ENV = "GEM_POD_UID"


def default_priority(pod_uid: str | None = None) -> int:
    """A peering priority distinct per replica: from the pod UID when known, else random.

    Two replicas with equal priorities pause each other (kopf's "Pausing all operators, including
    self"), so a fixed default would make a two-replica install do nothing.
    """
    uid = pod_uid if pod_uid is not None else os.environ.get(POD_UID_ENV, "")
    if uid:
        digest = hashlib.sha256(uid.encode()).digest()
        return 1 + int.from_bytes(digest[:8], "big") % (PRIORITY_MAX - 1)
    return 1 + secrets.randbelow(PRIORITY_MAX - 1)


@dataclass(frozen=True)
class OperatorOptions:
    """What `kopf run` would take on its command line."""

    namespaces: Sequence[str] = ()
    clusterwide: bool = False
    standalone: bool = False
    peering_name: str | None = None
    liveness_endpoint: str | None = None
    # None: a distinct priority per process (default_priority); pass one to pin it.
    priority: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def resolved_priority(self) -> int:
        return self.priority if self.priority is not None else default_priority()


def _handlers() -> kopf.OperatorRegistry:
    # Imported lazily so that `gemop crds` and friends never import the handlers.
    from gem_operator.controllers import REGISTRY

    return REGISTRY


def run_foreground(opts: OperatorOptions) -> None:
    """Block running the operator until SIGINT/SIGTERM, exactly like `kopf run`.

    On SIGTERM kopf withdraws this replica's peering record before it exits, so a paused peer
    resumes at once instead of waiting for the record to expire.
    """
    kopf.run(
        registry=_handlers(),
        standalone=opts.standalone,
        peering_name=opts.peering_name,
        liveness_endpoint=opts.liveness_endpoint,
        clusterwide=opts.clusterwide,
        namespaces=list(opts.namespaces),
        priority=opts.resolved_priority(),
    )


class OperatorThread:
    """The operator on its own event loop in a daemon thread, stoppable from the caller."""

    def __init__(self, opts: OperatorOptions) -> None:
        self._opts = opts
        self.priority = opts.resolved_priority()
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
                    priority=self.priority,
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
