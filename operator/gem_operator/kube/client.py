"""A small async API client over lightkube that speaks plain manifests (dicts).

Builders in ``render/`` produce dicts; this module turns them into API calls. Updates are JSON
merge patches of the fields we own, never a PUT of the whole object (design.md section 3). Every
call goes through ``kube.retry`` (429/5xx/resets/timeouts retried with backoff and jitter) and,
when it fails for good, raises ``KubeCallError`` naming the call.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import httpx2
from lightkube import ALL_NS, AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericGlobalStatus,
    GenericNamespacedResource,
    GenericNamespacedStatus,
    create_global_resource,
    create_namespaced_resource,
)
from lightkube.types import PatchType

from gem_operator.api.kinds import KINDS
from gem_operator.kube import auth
from gem_operator.kube.diff import is_subset
from gem_operator.kube.retry import DEFAULT_POLICY, KubeCallError, RetryPolicy, with_retries
from gem_operator.render.common import ANNOTATION_SPEC_HASH

log = logging.getLogger(__name__)

for _info in KINDS:
    create_namespaced_resource(_info.group, _info.version, _info.kind, _info.plural)
# Kueue's Workload, kept for a GEMTraining that names a queue, the ResourceFlavors an admission
# names, whose node labels bound the placement, and the WorkloadPriorityClass that gives the gang its
# priority (controllers/kueue.py).
# v1beta2 is Kueue's current API; v1beta1 where v2 is not served.
for _kueue_version in ("v1beta2", "v1beta1"):
    create_namespaced_resource("kueue.x-k8s.io", _kueue_version, "Workload", "workloads")
    create_global_resource("kueue.x-k8s.io", _kueue_version, "ResourceFlavor", "resourceflavors")
    create_global_resource("kueue.x-k8s.io", _kueue_version, "WorkloadPriorityClass", "workloadpriorityclasses")

# Fields of a child we never patch: identity, server-managed metadata and status.
_UNPATCHED_TOP = {"apiVersion", "kind", "status"}


UNKNOWN = object()  # `actual` not given: read it first


class ApplyResult(enum.StrEnum):
    CREATED = "created"
    PATCHED = "patched"
    UNCHANGED = "unchanged"
    # Deleted because its immutable spec changed; created again on the next reconcile.
    REPLACED = "replaced"


class Applied(NamedTuple):
    """What `KubeApi.apply` did, and the object as the server now holds it (None once deleted).

    Callers that go on with the children (a gang to ungate) read them from here instead of
    listing them again right after writing them.
    """

    result: ApplyResult
    object: dict[str, Any] | None


@functools.cache
def _resource(api_version: str, kind: str) -> Any:
    """The kind as a dict-backed lightkube resource (lightkube's Generic), built from its typed class.

    This facade speaks plain dicts, so lightkube's typed models would only be converted to dicts
    and back: a 512-pod gang spent more time in those conversions (request bodies, responses,
    lists) than on the wire. A generic class with the typed class's API info (path, plural,
    scope) wraps the decoded JSON as it is, and keeps fields the typed model does not know.
    It is not registered, so lightkube's own registry (and its users) keep the typed classes.
    """
    typed = codecs.resource_registry.load(api_version, kind)
    if issubclass(typed, GenericNamespacedResource | GenericGlobalResource):
        return typed
    namespaced = issubclass(typed, NamespacedResource)
    base, status_base = (
        (GenericNamespacedResource, GenericNamespacedStatus)
        if namespaced
        else (GenericGlobalResource, GenericGlobalStatus)
    )
    attrs: dict[str, Any] = {"_api_info": typed._api_info}
    typed_status = getattr(typed, "Status", None)
    if typed_status is not None:
        attrs["Status"] = type(f"{kind}Status", (status_base,), {"_api_info": typed_status._api_info})
    return type(kind, (base,), attrs)


def _to_dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def _comparable(manifest: Mapping[str, Any]) -> dict[str, Any]:
    meta = manifest.get("metadata", {})
    out = {k: v for k, v in manifest.items() if k not in _UNPATCHED_TOP and k != "metadata"}
    out["metadata"] = {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
    return out


class KubeApi:
    """Thin async facade; one instance per operator process (kept in kopf's memo)."""

    def __init__(self, client: AsyncClient, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self._client = client
        self._policy = policy

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> KubeApi:
        """From $KUBECONFIG/~/.kube/config or the in-cluster service account, as kubectl does; on the
        same credentials as kopf's login (exec plugins included), see ``kube/auth.py``."""
        # A request that hangs is a failed attempt (retried), not a stuck pass.
        timeout = httpx2.Timeout(15.0, connect=5.0)
        return cls(auth.async_client(path, context, field_manager="gem-operator", timeout=timeout))

    async def close(self) -> None:
        await self._client.close()

    async def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        res = _resource(api_version, kind)
        try:
            obj = await with_retries(
                f"get {kind} {namespace}/{name}",
                lambda: self._client.get(res, name, namespace=namespace),
                passthrough={404},
                policy=self._policy,
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise
        return _to_dict(obj)

    async def list(
        self, api_version: str, kind: str, namespace: str | None, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Objects of a kind; ``namespace=None`` means every namespace (or a cluster-scoped kind)."""
        res = _resource(api_version, kind)
        if namespace is None:
            namespace = ALL_NS if issubclass(res, NamespacedResource) else None
        selector: dict[str, Any] = dict(labels or {})

        async def once() -> list[dict[str, Any]]:
            return [_to_dict(o) async for o in self._client.list(res, namespace=namespace, labels=selector)]

        where = "all namespaces" if namespace in (None, ALL_NS) else namespace
        return await with_retries(f"list {kind} in {where}", once, policy=self._policy)

    async def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        obj: Any = _resource(manifest["apiVersion"], manifest["kind"])(manifest)
        meta = manifest.get("metadata") or {}
        call = f"create {manifest['kind']} {meta.get('namespace', 'default')}/{meta.get('name')}"
        # 409 passes through: apply() reads the object an earlier (or retried) create made.
        return _to_dict(
            await with_retries(call, lambda: self._client.create(obj), passthrough={409}, policy=self._policy)
        )

    async def create_if_served(self, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create; None when the server answers 404, i.e. it does not serve the kind (a CRD not installed).

        For optional integrations (Kueue's Workload): the caller tells the user what is missing.
        """
        try:
            return await self.create(manifest)
        except KubeCallError as exc:
            if exc.code == 404:
                return None
            raise

    async def patch_merge(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str,
        patch: Mapping[str, Any],
        *,
        status: bool = False,
    ) -> dict[str, Any]:
        res = _resource(api_version, kind)
        if status:
            res = res.Status
        body = dict(patch)
        obj = await with_retries(
            f"patch {kind}{'/status' if status else ''} {namespace}/{name}",
            lambda: self._client.patch(res, name, body, namespace=namespace, patch_type=PatchType.MERGE),
            # A merge patch carries no resourceVersion precondition: a 409 is the server's own
            # write conflict, and the same patch applies cleanly on a retry.
            also_retry={409},
            policy=self._policy,
        )
        return _to_dict(obj)

    async def delete(self, api_version: str, kind: str, name: str, namespace: str) -> bool:
        """Delete with background propagation; False when it was already gone."""
        res = _resource(api_version, kind)
        try:
            await with_retries(
                f"delete {kind} {namespace}/{name}",
                lambda: self._client.delete(res, name, namespace=namespace),
                passthrough={404},
                policy=self._policy,
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise
        return True

    async def apply(
        self, manifest: Mapping[str, Any], *, immutable_spec: bool = False, actual: Any = UNKNOWN
    ) -> Applied:
        """Create the child, or merge-patch the fields that drifted.

        ``actual`` is the object as the caller just listed it (None: absent), saving a GET per child.
        ``immutable_spec`` is for pods: their spec cannot be patched, and the server adds fields
        to it (default tolerations), so drift is judged by the ``gem.dev/spec-hash`` annotation
        alone, and a changed pod is deleted; the next reconcile creates it again once it is gone.
        """
        meta = manifest["metadata"]
        api_version, kind = manifest["apiVersion"], manifest["kind"]
        name, namespace = meta["name"], meta.get("namespace", "default")
        if actual is UNKNOWN:
            actual = await self.get(api_version, kind, name, namespace)
        if actual is None:
            try:
                return Applied(ApplyResult.CREATED, await self.create(manifest))
            except ApiError as exc:
                if exc.status.code != 409:
                    raise
                # An earlier run of this operator created it meanwhile (or it is terminating).
                actual = await self.get(api_version, kind, name, namespace)
                if actual is None:
                    return Applied(ApplyResult.REPLACED, None)
        if immutable_spec:
            want = (meta.get("annotations") or {}).get(ANNOTATION_SPEC_HASH)
            have = ((actual.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH)
            if want == have:
                return Applied(ApplyResult.UNCHANGED, actual)
            log.info("deleting %s %s/%s to recreate it: its spec changed", kind, namespace, name)
            await self.delete(api_version, kind, name, namespace)
            return Applied(ApplyResult.REPLACED, None)
        desired = _comparable(manifest)
        if is_subset(desired, actual):
            return Applied(ApplyResult.UNCHANGED, actual)
        return Applied(ApplyResult.PATCHED, await self.patch_merge(api_version, kind, name, namespace, desired))
