"""The Kubernetes API emulator: kmock's `KubernetesEmulator` plus the fixes a real client needs.

This is the only module that touches kmock (pinned to exactly 0.8 because it adapts kmock
internals: `_handle`, `_serve_version`, `_objects`, `_buses`, `_lock`, `parsing.parse_path`).
kmock gives us request parsing, discovery, Status-shaped errors, the object store and the
per-resource event buses. On top of it, this module implements API-server semantics that
kopf, lightkube and kubectl rely on and kmock 0.8 lacks; each fix is marked `FIX:` with why.

The in-process API (`create`, `patch`, `delete`, `get`, `list_objects`) is what the lifecycle
simulator and `EmbeddedCluster` use; HTTP requests are routed to the same methods.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import functools
import gzip
import importlib.metadata
import importlib.resources
import json
import secrets
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import parsing as _kmock_parsing

from gem_operator.sim.crds import ALL_VERBS, ResourceSpec, crd_resources
from gem_operator.sim.objects import (
    Obj,
    PatchError,
    dotted,
    json_patch,
    matches_fields,
    matches_labels,
    merge_patch,
    owned_by,
    parse_label_selector,
)

KMOCK_VERSION = importlib.metadata.version("kmock")
if KMOCK_VERSION != "0.8":  # pragma: no cover - pinned in pyproject.toml
    raise ImportError(f"gem_operator.sim adapts kmock 0.8 internals; found kmock {KMOCK_VERSION}")

Resource = kmock.resource
ChangeListener = Callable[[str, Any, Obj], None]
CRD_RESOURCE = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NAMESPACES = Resource("", "v1", "namespaces")
WATCH_LOG_SIZE = 1024


# FIX: kmock's path parser unpacks `/api/v1/namespaces` as "namespace <missing>" and crashes
# (ValueError), and reads `/api/v1/namespaces/default` as a namespace with no resource. Both
# address Namespace objects themselves; kopf (`-n default`) and kubectl request them.
_original_parse_path = _kmock_parsing.parse_path


def _parse_path(path: str) -> Any:
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and (len(parts) <= 4 or parts[4] in ("status", "finalize")):
        return _kmock_parsing.ParsedPath(
            group="",
            version="v1",
            plural="namespaces",
            name=parts[3] if len(parts) > 3 else None,
            subresource=parts[4] if len(parts) > 4 else None,
        )
    return _original_parse_path(path)


if getattr(_kmock_parsing.parse_path, "__name__", "") != "_parse_path":
    _kmock_parsing.parse_path = _parse_path


@functools.cache
def _bundled_resources() -> bytes:
    blob = importlib.resources.files("kmock._internal").joinpath("resources.json.gz").read_bytes()
    return gzip.decompress(blob)


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_version_of(res: Any) -> str:
    return str(res.version) if not res.group else f"{res.group}/{res.version}"


class ApiError(kmock.KubernetesError):  # type: ignore[misc]
    """A Status-shaped error; `reason` uses the API server's words (NotFound, AlreadyExists...)."""


def _error(status: int, reason: str, message: str) -> ApiError:
    return ApiError(status=status, reason=reason, message=message, details={"causes": []})


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator with API-server semantics: see the module docstring."""

    _rv: int = attrs.field(default=0, init=False)
    _specs: dict[Any, ResourceSpec] = attrs.field(factory=dict, init=False)
    _log: dict[Any, collections.deque[tuple[int, Obj]]] = attrs.field(factory=dict, init=False)
    _log_floor: dict[Any, int] = attrs.field(factory=dict, init=False)
    listeners: list[ChangeListener] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # Built-in kinds (Pod, Node, Deployment, Event, events.k8s.io, Lease, CRD, ...) from
        # the discovery snapshot kmock bundles, so clients find them without declarations.
        # (Read directly: kmock's load_bundled() uses a deprecated importlib API that warns.)
        self.resources.load_data(_bundled_resources())

    # -- resource registry -------------------------------------------------------------------------

    def register(self, spec: ResourceSpec) -> Any:
        res = Resource(spec.group, spec.version, spec.plural)
        self._specs[res] = spec
        self.resources[res] = kmock.ResourceInfo(
            namespaced=spec.namespaced,
            kind=spec.kind,
            singular=spec.singular or spec.kind.lower(),
            verbs=set(ALL_VERBS),
            shortnames=set(spec.shortnames),
            categories=set(spec.categories),
            subresources=set(spec.subresources),
        )
        return res

    def info(self, res: Any) -> Any:
        """The discovery info of a known resource (404 otherwise; never auto-creates one)."""
        if res is None or not res.plural or res not in self.resources:
            raise _error(404, "NotFound", f"the server could not find the requested resource {res}")
        return self.resources[res]

    def resolve(self, api_version: str, kind_or_plural: str) -> Any:
        """Find a resource by apiVersion and kind, plural, singular or short name."""
        group, _, version = api_version.rpartition("/")
        wanted = kind_or_plural.lower()
        for res in self.resources:
            if res.group == group and res.version == version:
                info = self.resources[res]
                names = {res.plural, (info.kind or "").lower(), info.singular or "", *info.shortnames}
                if wanted in names:
                    return res
        raise _error(404, "NotFound", f"no resource {kind_or_plural!r} in {api_version!r}")

    def _has_status(self, res: Any) -> bool:
        return "status" in self.info(res).subresources

    # -- reading -----------------------------------------------------------------------------------

    def get_object(self, res: Any, namespace: str | None, name: str) -> Obj | None:
        """The current object or None; a deep copy, safe to mutate."""
        key = (res, namespace if self.info(res).namespaced else None, name)
        if key not in self._objects:
            return None
        return copy.deepcopy(self._objects[key].raw)

    def list_objects(
        self,
        res: Any,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[Obj]:
        requirements = parse_label_selector(labels) if labels else []
        result: list[Obj] = []
        for (key_res, key_ns, _), obj in self._objects.items():
            if key_res != res or obj.deleted or (namespace is not None and key_ns != namespace):
                continue
            raw = obj.last.raw
            if matches_labels((raw.get("metadata") or {}).get("labels") or {}, requirements) and (
                not fields or matches_fields(raw, fields)
            ):
                result.append(copy.deepcopy(raw))
        return result

    @property
    def resource_version(self) -> int:
        return self._rv

    # -- writing -----------------------------------------------------------------------------------

    async def _emit(self, res: Any, kind: str, obj: Obj) -> None:
        # FIX: kmock streams events without resourceVersions and keeps no history, so a
        # list-then-watch client (kopf, lightkube) loses events that happen in between. We keep
        # a bounded per-resource log so `?watch=true&resourceVersion=N` resumes after N.
        event = {"type": kind, "object": copy.deepcopy(obj)}
        log = self._log.setdefault(res, collections.deque(maxlen=WATCH_LOG_SIZE))
        if len(log) == log.maxlen:
            self._log_floor[res] = log[0][0]
        log.append((self._rv, event))
        await self._buses[res].put(event)
        for listener in list(self.listeners):
            listener(kind, res, obj)

    def _bump(self, obj: Obj) -> None:
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)

    async def create_object(
        self, res: Any, obj: Obj, namespace: str | None = None, *, keep_status: bool = False
    ) -> Obj:
        """Store a new object as the API server would: ids, timestamps, generation, defaults."""
        info = self.info(res)
        if not isinstance(obj, dict):
            raise _error(400, "BadRequest", "the body must be a JSON object")
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if namespace and meta.get("namespace") not in (None, namespace):
            raise _error(400, "BadRequest", "the namespace of the object does not match the URL")
        namespace = (namespace or meta.get("namespace") or None) if info.namespaced else None
        if info.namespaced and not namespace:
            raise _error(400, "BadRequest", "a namespace is required for namespaced resources")
        if not meta.get("name") and meta.get("generateName"):
            alphabet = "bcdfghjklmnpqrstvwxz2456789"
            meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
        if not meta.get("name"):
            raise _error(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        async with self._lock:
            key = (res, namespace, meta["name"])
            if key in self._objects and not self._objects[key].deleted:
                raise _error(409, "AlreadyExists", f'{res.plural} "{meta["name"]}" already exists')
            obj["apiVersion"] = api_version_of(res)
            obj["kind"] = info.kind
            if namespace:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            # FIX: kmock sets none of these; kopf, lightkube and garbage collection need them.
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            if not keep_status and self._has_status(res):
                obj.pop("status", None)  # as the API server: status is written via /status only
            self._defaults(res, obj)
            self._bump(obj)
            self._objects[key] = obj
            await self._emit(res, "ADDED", obj)
            if self._orphaned(obj):
                # FIX: as the real garbage collector, collect a dependent whose owners are all gone
                # (e.g. created by a controller racing with its owner's deletion).
                await self._remove(res, key)
                await self._collect_garbage(meta["uid"])
        if res == CRD_RESOURCE:
            for spec in crd_resources(obj):
                self.register(spec)
        return copy.deepcopy(obj)

    def _defaults(self, res: Any, obj: Obj) -> None:
        """The few server-side defaults our clients read back."""
        if res == Resource("", "v1", "pods"):
            obj.setdefault("status", {}).setdefault("phase", "Pending")
            obj.setdefault("spec", {}).setdefault("restartPolicy", "Always")
        elif res == NAMESPACES:
            obj.setdefault("status", {}).setdefault("phase", "Active")
        elif res.group == "apps" and res.plural in ("deployments", "statefulsets", "replicasets"):
            obj.setdefault("spec", {}).setdefault("replicas", 1)

    async def patch_object(
        self,
        res: Any,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        replace: bool = False,
    ) -> Obj:
        """Merge-patch, JSON-patch or replace an object (or its /status or /scale subresource)."""
        info = self.info(res)
        namespace = namespace if info.namespaced else None
        key = (res, namespace, name)
        if subresource not in (None, "status", "scale") or (
            subresource is not None and subresource not in info.subresources
        ):
            raise _error(404, "NotFound", f"the server could not find the requested resource ({subresource})")
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                raise _error(404, "NotFound", f'{res.plural} "{name}" not found')
            old: Obj = copy.deepcopy(self._objects[key].raw)
            if subresource == "scale":
                body = self._scale_to_patch(res, body)
            try:
                if replace:
                    new = copy.deepcopy(body) if isinstance(body, dict) else {}
                elif patch_type == "json":
                    new = json_patch(old, body)
                else:
                    new = merge_patch(old, body)
            except PatchError as exc:
                # FIX: kmock answers a failed JSON-patch `test` (or any bad op) with 500; the
                # API server says 422 Invalid, which clients treat as "precondition failed".
                raise _error(422, "Invalid", str(exc)) from exc
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if wanted_rv and wanted_rv != old["metadata"].get("resourceVersion"):
                raise _error(409, "Conflict", "the object has been modified; please apply your changes")
            new = self._guard(res, old, new, subresource)
            if new == old:
                return old  # a no-op write changes nothing and emits nothing, as the API server
            self._bump(new)
            self._objects[key] = new
            meta = new["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                await self._remove(res, key)
                await self._collect_garbage(meta["uid"])
            else:
                await self._emit(res, "MODIFIED", new)
        return copy.deepcopy(new)

    def _guard(self, res: Any, old: Obj, new: Obj, subresource: str | None) -> Obj:
        """Keep what a client cannot change: identity, status vs spec split, generation."""
        new.setdefault("metadata", {})
        if self._has_status(res):
            # FIX: kmock merges everything everywhere. With a status subresource, a write to
            # /status changes only `status`, and a write to the object leaves `status` alone.
            if subresource == "status":
                new = {**old, "status": new.get("status")} if new.get("status") is not None else {**old}
                if new.get("status") is None:
                    new.pop("status", None)
            elif "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        for field in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp", "generation"):
            if field in old["metadata"]:
                new["metadata"][field] = old["metadata"][field]
            else:
                new["metadata"].pop(field, None)
        new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]

        # FIX: kmock has no `metadata.generation`. It starts at 1 and grows when anything but
        # metadata and status changes, never on /status writes (observedGeneration relies on it).
        def body_of(obj: Obj) -> Obj:
            return {k: v for k, v in obj.items() if k not in ("metadata", "status")}

        if body_of(new) != body_of(old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return new

    def _scale_to_patch(self, res: Any, body: Any) -> Obj:
        spec_path, _ = self._scale_paths(res)
        replicas = ((body or {}).get("spec") or {}).get("replicas") if isinstance(body, dict) else None
        if not isinstance(replicas, int) or replicas < 0:
            raise _error(422, "Invalid", "spec.replicas: must be a non-negative integer")
        patch: Obj = {}
        cursor = patch
        *parents, leaf = spec_path.split(".")
        for part in parents:
            cursor = cursor.setdefault(part, {})
        cursor[leaf] = replicas
        return patch

    def _scale_paths(self, res: Any) -> tuple[str, str]:
        spec = self._specs.get(res)
        if spec is not None and spec.scale_paths is not None:
            return spec.scale_paths
        return ("spec.replicas", "status.replicas")

    def scale_of(self, res: Any, obj: Obj) -> Obj:
        """The `autoscaling/v1 Scale` view of an object (GET .../scale)."""
        spec_path, status_path = self._scale_paths(res)
        meta = obj["metadata"]
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
            "spec": {"replicas": dotted(obj, spec_path) or 0},
            "status": {"replicas": dotted(obj, status_path) or 0},
        }

    async def delete_object(self, res: Any, namespace: str | None, name: str, *, orphan: bool = False) -> Obj:
        """Delete now, or mark for deletion while finalizers remain; then collect dependents."""
        info = self.info(res)
        key = (res, namespace if info.namespaced else None, name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                raise _error(404, "NotFound", f'{res.plural} "{name}" not found')
            obj: Obj = copy.deepcopy(self._objects[key].raw)
            meta = obj["metadata"]
            if meta.get("finalizers"):
                if not meta.get("deletionTimestamp"):
                    meta["deletionTimestamp"] = _now()
                    self._bump(obj)
                    self._objects[key] = obj
                    await self._emit(res, "MODIFIED", obj)
                return copy.deepcopy(obj)
            obj = await self._remove(res, key)
            if not orphan:
                await self._collect_garbage(meta["uid"])
                if res == NAMESPACES:
                    await self._delete_namespace_contents(name)
        return obj

    async def _remove(self, res: Any, key: Any) -> Obj:
        obj: Obj = copy.deepcopy(self._objects[key].raw)
        self._bump(obj)
        del self._objects[key]
        await self._emit(res, "DELETED", obj)
        return obj

    def _orphaned(self, obj: Obj) -> bool:
        refs = [r.get("uid") for r in obj["metadata"].get("ownerReferences") or []]
        if not refs:
            return False
        alive = {o.raw["metadata"].get("uid") for o in self._objects.values() if not o.deleted}
        return not any(uid in alive for uid in refs)

    async def _collect_garbage(self, uid: str) -> None:
        """FIX: kmock has no garbage collector. Deleting an owner deletes (cascading) every
        object whose ownerReferences name its uid, as the background GC of Kubernetes does;
        dependents with finalizers are only marked for deletion. Runs under the store lock."""
        pending = [uid]
        while pending:
            owner = pending.pop()
            for key, obj in list(self._objects.items()):
                raw = obj.raw
                if not owned_by(raw, owner):
                    continue
                if raw["metadata"].get("finalizers"):
                    if not raw["metadata"].get("deletionTimestamp"):
                        marked = copy.deepcopy(raw)
                        marked["metadata"]["deletionTimestamp"] = _now()
                        self._bump(marked)
                        self._objects[key] = marked
                        await self._emit(key[0], "MODIFIED", marked)
                    continue
                removed = await self._remove(key[0], key)
                pending.append(removed["metadata"]["uid"])

    async def _delete_namespace_contents(self, namespace: str) -> None:
        for key in [key for key in self._objects if key[1] == namespace]:
            removed = await self._remove(key[0], key)
            await self._collect_garbage(removed["metadata"]["uid"])

    # -- HTTP --------------------------------------------------------------------------------------

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        # Requests are kept by kmock for assertions; a long `gemop sim up` must not grow forever.
        if len(self._requests) > 2000:
            del self._requests[:-1000]
        if self._errors and len(self._errors[-1]) > 200:
            del self._errors[-1][:-100]
        res = request.resource
        if res is None or not res.plural:
            # Discovery and non-resource paths: kmock's scaffold (skipping kmock's own mutation
            # step in KubernetesEmulator._handle, which this class replaces).
            response: aiohttp.web.StreamResponse = await kmock.KubernetesScaffold._handle(self, request)
            return response
        self.info(res)  # 404 for unknown resources
        try:
            return await self._handle_resource(request)
        except ValueError as exc:  # a bad selector or CRD: the client's fault, not a crash
            raise _error(400, "BadRequest", str(exc)) from exc

    async def _handle_resource(self, request: Any) -> aiohttp.web.StreamResponse:
        res = request.resource
        method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
        params = dict(request.params)
        if method == "GET" and params.get("watch") in ("true", "1"):
            return await self._watch(request)
        if method == "GET" and request.name is None:
            return self._json(self._list_payload(request))
        if method == "GET":
            obj = self.get_object(res, request.namespace, request.name)
            if obj is None:
                raise _error(404, "NotFound", f'{res.plural} "{request.name}" not found')
            return self._json(self.scale_of(res, obj) if request.subresource == "scale" else obj)
        if "protobuf" in request.headers.get("Content-Type", ""):
            # Typed kubectl generators (`kubectl create configmap`) send protobuf; the emulator
            # speaks JSON only. 415 tells the client so (use `kubectl create -f` instead).
            raise _error(415, "UnsupportedMediaType", "the emulator accepts JSON bodies only")
        try:
            body = json.loads(request.body) if request.body else {}
        except ValueError as exc:
            raise _error(400, "BadRequest", f"the body is not valid JSON: {exc}") from exc
        if method == "POST" and request.name is None:
            return self._json(await self.create_object(res, body, request.namespace), status=201)
        if method in ("PATCH", "PUT") and request.name is not None:
            content_type = request.headers.get("Content-Type", "")
            if "apply-patch" in content_type:
                raise _error(415, "UnsupportedMediaType", "server-side apply is not supported by the emulator")
            obj = await self.patch_object(
                res,
                request.namespace,
                request.name,
                body,
                patch_type="json" if "json-patch" in content_type else "merge",
                subresource=request.subresource,
                replace=method == "PUT" and request.subresource != "scale",
            )
            return self._json(self.scale_of(res, obj) if request.subresource == "scale" else obj)
        if method == "DELETE" and request.name is not None:
            orphan = isinstance(body, dict) and body.get("propagationPolicy") == "Orphan"
            orphan = orphan or params.get("propagationPolicy") == "Orphan"
            return self._json(await self.delete_object(res, request.namespace, request.name, orphan=orphan))
        raise _error(405, "MethodNotAllowed", f"{method} is not supported on this path by the emulator")

    @staticmethod
    def _json(payload: Obj, status: int = 200) -> aiohttp.web.StreamResponse:
        return aiohttp.web.json_response(payload, status=status)

    def _list_payload(self, request: Any) -> Obj:
        res = request.resource
        params = request.params
        items = self.list_objects(
            res,
            request.namespace,
            labels=params.get("labelSelector"),
            fields=params.get("fieldSelector"),
        )
        # FIX: kmock's lists lack kind/apiVersion and a real resourceVersion; lightkube and
        # kubectl decode by kind, and list-then-watch needs the version to resume from.
        return {
            "apiVersion": api_version_of(res),
            "kind": f"{self.info(res).kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _matches(self, request: Any, event: Obj) -> bool:
        if event.get("type") == "ERROR":
            return True
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if request.namespace is not None and meta.get("namespace") != request.namespace:
            return False
        if request.name is not None and meta.get("name") != request.name:
            return False
        labels = request.params.get("labelSelector")
        if labels and not matches_labels(meta.get("labels") or {}, parse_label_selector(labels)):
            return False
        fields = request.params.get("fieldSelector")
        return not fields or matches_fields(obj, fields)

    async def _watch(self, request: Any) -> aiohttp.web.StreamResponse:
        """Stream watch events as JSON lines, resuming after `resourceVersion` when given."""
        res = request.resource
        parse_label_selector(request.params.get("labelSelector") or "")  # 400 before streaming
        since = request.params.get("resourceVersion") or ""
        timeout = float(request.params.get("timeoutSeconds") or 0) or None
        bus = self._buses[res]
        async with self._lock:  # the mark and the snapshot must see the same moment
            mark = await bus.mark()
            if since.isdigit() and int(since) > 0:
                if int(since) < self._log_floor.get(res, 0):
                    gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410}
                    initial = [{"type": "ERROR", "object": {**gone, "reason": "Expired", "message": "too old"}}]
                else:
                    initial = [ev for rv, ev in self._log.get(res, ()) if rv > int(since)]
            else:
                initial = [{"type": "ADDED", "object": o} for o in self.list_objects(res, request.namespace)]
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request._raw_request)
        stream: AsyncGenerator[Obj, None] = bus.stream(since=mark)  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            for event in initial:
                if self._matches(request, event):
                    await response.write(json.dumps(event).encode() + b"\n")
                if event["type"] == "ERROR":  # 410 Gone: the client must list again
                    return response
            while deadline is None or loop.time() < deadline:
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                try:
                    event = await asyncio.wait_for(anext(stream), remaining)
                except TimeoutError:
                    break
                if self._matches(request, event):
                    await response.write(json.dumps(event).encode() + b"\n")
        except ConnectionResetError:  # the client went away
            pass
        finally:
            await stream.aclose()
            await bus.unmark(mark)
        return response

    async def _serve_version(self, request: Any) -> Any:
        payload: Any = await super()._serve_version(request)
        # FIX: kmock reports the core group as `groupVersion: "/v1"`; clients expect "v1".
        if request.resource is not None and request.resource.group == "":
            payload["groupVersion"] = "v1"
        # FIX: kmock repeats short names and categories on `x/status` and `x/scale` entries, so
        # kubectl warns that `deploy` "could also match" them; subresources carry neither.
        for entry in payload.get("resources") or []:
            if "/" in entry.get("name", ""):
                entry.update(shortNames=[], categories=[], verbs=["get", "patch", "update"])
        return payload


def _plain_json(
    handler: Callable[[aiohttp.web.BaseRequest], Awaitable[aiohttp.web.StreamResponse]],
) -> Callable[[aiohttp.web.BaseRequest], Awaitable[aiohttp.web.StreamResponse]]:
    """Answer with ``Content-Type: application/json`` exactly, as the API server does.

    aiohttp adds ``; charset=utf-8``; some clients (lightkube) compare the header verbatim and
    would then not recognise a Status error body (a 404 would surface as a raw HTTP error).
    """

    async def wrapped(request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        response = await handler(request)
        if not response.prepared and response.content_type == "application/json":
            response.headers["Content-Type"] = "application/json"
        return response

    return wrapped


async def start_http(emulator: Emulator, host: str = "127.0.0.1", port: int = 0) -> tuple[aiohttp.web.BaseRunner, str]:
    """Serve the emulator on a real TCP port; returns the runner (to clean up) and the URL."""
    # handler_cancellation: a client that drops a watch must end its streaming handler.
    server = aiohttp.web.Server(_plain_json(emulator), handler_cancellation=True, access_log=None)
    runner = aiohttp.web.ServerRunner(server, shutdown_timeout=1.0)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    url_host = "127.0.0.1" if bound_host in ("0.0.0.0", "::") else bound_host
    return runner, f"http://{url_host}:{bound_port}"
