"""The shared reconcile pass: validate -> render -> apply children -> prune -> status.

Each kind's module supplies only what differs (which children, how status is read off them).
Everything here is level-triggered and idempotent: a second pass over an unchanged cluster makes
no API writes, and an operator restarted mid-pass converges on the children it already created.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from gem_operator.api.kinds import KindInfo
from gem_operator.api.validation import InvalidSpec, parse_spec
from gem_operator.controllers import metrics
from gem_operator.controllers.status import StatusDraft, invalid, status_changes
from gem_operator.kube import Applied, ApplyResult, KubeApi, KubeCallError, is_subset
from gem_operator.kube.client import UNKNOWN
from gem_operator.render.common import LABEL_INSTANCE, LABEL_KIND

log = logging.getLogger(__name__)

# A failed pass is retried after about 1, 2, 4 ... s (jittered), at most this long: soon enough
# that a brief API hiccup costs seconds, not kopf's default 60 s, and gentle on a struggling API.
REQUEUE_CAP_SECONDS = 30.0


@dataclass
class Outcome:
    """What one pass decided: the new status and the Events worth telling a person."""

    draft: StatusDraft
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    result: str = "ok"
    # What the pass got done before it failed, for the status message ("20/24 children applied").
    progress: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PassContext:
    kube: KubeApi
    body: Mapping[str, Any]
    now: datetime
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"].get("namespace", "default"))


KindPass = Callable[[PassContext, Any, Outcome], Awaitable[None]]


# Children applied at once: enough to pipeline a large gang's API calls, few enough to be polite.
APPLY_CONCURRENCY = 16


async def apply_children(
    ctx: PassContext,
    info: KindInfo,
    manifests: Sequence[Mapping[str, Any]],
    outcome: Outcome,
    observed: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> dict[str, Applied]:
    """Apply each child (up to APPLY_CONCURRENCY at once); report creations/changes in one Event.

    Returns what was done to each child ("Kind/name") and the child as the server now holds it.

    ``observed`` maps a kind the caller has just listed to its objects by name: a child of that
    kind missing from it is known to be absent (even when the list was empty, as for a new gang),
    which saves a GET per child of a large gang.
    """
    semaphore = asyncio.Semaphore(APPLY_CONCURRENCY)

    async def one(manifest: Mapping[str, Any]) -> tuple[str, Applied]:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        actual: Any = UNKNOWN
        if observed is not None and kind in observed:
            actual = observed[kind].get(name)
        async with semaphore:
            applied = await ctx.kube.apply(manifest, immutable_spec=kind == "Pod", actual=actual)
        if applied.result is not ApplyResult.UNCHANGED:
            metrics.CHILDREN.labels(info.kind, kind, applied.result.value).inc()
        return f"{kind}/{name}", applied

    # Every child is tried even when one fails (no task outlives the pass); the first error is raised.
    settled = await asyncio.gather(*(one(m) for m in manifests), return_exceptions=True)
    errors = [r for r in settled if isinstance(r, BaseException)]
    results = dict(r for r in settled if not isinstance(r, BaseException))
    if errors:
        outcome.progress.append(f"{len(results)}/{len(settled)} children applied")
        raise errors[0]
    changed: dict[str, list[str]] = {}
    for key, applied in results.items():
        if applied.result is not ApplyResult.UNCHANGED:
            changed.setdefault(applied.result.value, []).append(key)
    for action, keys in changed.items():
        shown = ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
        outcome.events.append(("Normal", f"Children{action.capitalize()}", f"{action} {shown}"))
    return results


async def prune_children(
    ctx: PassContext,
    info: KindInfo,
    api_version: str,
    kind: str,
    keep: set[str],
    outcome: Outcome,
    extra_labels: Mapping[str, str] | None = None,
    listed: Sequence[Mapping[str, Any]] | None = None,
) -> list[str]:
    """Delete our children of one kind that the desired state no longer has.

    ``listed``: the children of that kind as the caller listed them this pass (a superset of the
    labels' selection is fine). It saves listing a large gang again right after applying it; a
    child made since that list is one the desired state has, or is pruned by the next pass.
    """
    labels = {LABEL_KIND: info.kind.lower(), LABEL_INSTANCE: ctx.name, **(extra_labels or {})}
    if listed is None:
        listed = await ctx.kube.list(api_version, kind, ctx.namespace, labels)
    deleted = []
    for obj in listed:
        if not is_subset(labels, obj["metadata"].get("labels") or {}):
            continue
        name = obj["metadata"]["name"]
        if name not in keep and await ctx.kube.delete(api_version, kind, name, ctx.namespace):
            deleted.append(name)
    if deleted:
        metrics.CHILDREN.labels(info.kind, kind, "deleted").inc(len(deleted))
        outcome.events.append(("Normal", "ChildrenDeleted", f"deleted {kind} {', '.join(sorted(deleted))}"))
    return deleted


def _was_invalid_with(status: Mapping[str, Any] | None, message: str) -> bool:
    for cond in (status or {}).get("conditions", []):
        if cond.get("type") == "Ready" and cond.get("reason") == "InvalidSpec":
            return bool(cond.get("message") == message)
    return False


class PassesInFlight:
    """The passes running now, operator-wide, so that shutdown closes the API client after them.

    kopf runs the cleanup handlers while a pass may still be mid-way (a 512-pod gang takes
    seconds); closing the client under it fails the pass with "the client has been closed" and a
    traceback. The startup handler puts one in the operator's memo, which every object's memo shares.
    """

    def __init__(self) -> None:
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self._running += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._running -= 1
            if not self._running:
                self._idle.set()

    @property
    def idle(self) -> bool:
        return self._idle.is_set()

    async def drained(self) -> None:
        """Returns once no pass runs (bound it with ``asyncio.timeout``)."""
        await self._idle.wait()


async def reconcile(
    info: KindInfo,
    kind_pass: KindPass,
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> None:
    """One level-triggered pass for any of our kinds, called by kopf handlers and timers.

    kopf runs an object's timer concurrently with its change handlers; the per-object lock (the
    memo is per object) serialises the passes, and ``body`` is kopf's live view, so a pass that
    waited starts from the state the previous one left.
    """
    lock = memo.get("pass_lock")
    if lock is None:
        lock = memo["pass_lock"] = asyncio.Lock()
    in_flight = memo.get("passes")
    async with lock, in_flight.running() if in_flight is not None else contextlib.nullcontext():
        await _reconcile(info, kind_pass, body=body, patch=patch, memo=memo, logger=logger)


async def _reconcile(
    info: KindInfo,
    kind_pass: KindPass,
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> None:
    if body.get("metadata", {}).get("deletionTimestamp"):
        return  # being deleted: garbage collection removes the children; creating more would race it
    started = time.perf_counter()
    now = datetime.now(UTC)
    old_status = body.get("status") or {}
    generation = body.get("metadata", {}).get("generation")
    outcome = Outcome(draft=StatusDraft.from_status(old_status, now, generation))
    try:
        try:
            spec = parse_spec(info, body)
        except InvalidSpec as exc:
            # Create nothing, say why once, keep serving every other resource.
            message = str(exc)
            if not _was_invalid_with(old_status, message):
                outcome.events.append(("Warning", "InvalidSpec", message))
                metrics.INVALID_SPECS.labels(info.kind).inc()
                logger.warning("rejected %s %s: %s", info.kind, body["metadata"].get("name"), message)
            invalid(outcome.draft, message)
            outcome.result = "invalid"
        else:
            ctx = PassContext(kube=memo.kube, body=body, now=now, logger=logger)
            await kind_pass(ctx, spec, outcome)
    except Exception as exc:
        metrics.RECONCILES.labels(info.kind, "error").inc()
        await _failed(info, body, memo, outcome, old_status, now, generation, exc)
    finally:
        metrics.RECONCILE_SECONDS.labels(info.kind).observe(time.perf_counter() - started)
    memo["failures"] = 0
    metrics.RECONCILES.labels(info.kind, outcome.result).inc()
    if any(c.get("type") == "Degraded" and c.get("status") == "True" for c in old_status.get("conditions") or []):
        outcome.draft.condition("Degraded", "False", "Reconciled", "the last pass completed")
    await write_status(memo.kube, info, body, status_changes(old_status, outcome.draft.to_status()))
    for type_, reason, message in outcome.events:
        kopf.event(body, type=type_, reason=reason, message=message[:1024])


async def write_status(kube: KubeApi, info: KindInfo, body: Mapping[str, Any], changes: Mapping[str, Any]) -> None:
    """Merge-patch /status through the kube seam (retried), not through kopf's ``patch``.

    kopf applies a timer's patch itself, and a failed status PATCH there (a 409 from a busy API
    server) ends the whole operator; here it is retried like any call, and a failure fails only
    this pass.
    """
    if not changes:
        return
    meta = body.get("metadata", {})
    name, namespace = meta["name"], meta.get("namespace", "default")
    try:
        await kube.patch_merge(info.api_version, info.kind, name, namespace, {"status": dict(changes)}, status=True)
    except KubeCallError as exc:
        if exc.code != 404:  # deleted meanwhile: nothing to report on
            raise


def requeue_delay(failures: int, rng: Callable[[], float] = random.random) -> float:
    """Seconds before retrying a pass that failed ``failures`` times in a row (jittered doubling)."""
    full = min(REQUEUE_CAP_SECONDS, 2.0 ** (failures - 1))
    return full / 2 + rng() * full / 2


async def _failed(
    info: KindInfo,
    body: kopf.Body,
    memo: kopf.Memo,
    outcome: Outcome,
    old_status: Mapping[str, Any],
    now: datetime,
    generation: int | None,
    exc: Exception,
) -> None:
    """A pass that failed: say so in status, the log and an Event, and ask kopf to retry soon.

    Only conditions are written: the fields the pass computed may rest on calls that did not
    happen (a restart counted before its pods were deleted), and writing them would make the
    retry count it twice. The children the pass did create stay; the retry finds and keeps them.
    """
    failures = int(memo.get("failures") or 0) + 1
    memo["failures"] = failures
    delay = requeue_delay(failures)
    cause = str(exc) or type(exc).__name__
    if not isinstance(exc, KubeCallError):
        cause = f"{type(exc).__name__}: {cause}"
    message = cause + (f" ({'; '.join(outcome.progress)})" if outcome.progress else "")
    message = message[:900]
    meta = body.get("metadata", {})
    log.error(
        "%s %s/%s: reconcile failed (attempt %d, retry in %.1f s): %s",
        info.kind,
        meta.get("namespace", "default"),
        meta.get("name"),
        failures,
        delay,
        message,
        exc_info=not isinstance(exc, KubeCallError),
    )
    draft = StatusDraft.from_status(old_status, now, generation)
    draft.condition("Degraded", "True", "ReconcileError", message)
    if info.scalable:
        draft.condition("Progressing", "True", "ReconcileError", message)
    new = draft.to_status()
    new.pop("observedGeneration", None)  # this generation was not reconciled
    try:
        await write_status(memo.kube, info, body, status_changes(old_status, new))
    except Exception as write_error:  # the API is down: the log line above still says why
        log.warning("%s %s: could not record the failure in status: %s", info.kind, meta.get("name"), write_error)
    kopf.event(body, type="Warning", reason="ReconcileError", message=message[:1024])
    raise kopf.TemporaryError(message, delay=delay) from exc
