"""The Kubernetes API emulator: kmock's `KubernetesEmulator` plus the fixes a real client needs.

This is the only module that touches kmock (pinned to exactly 0.8 because it adapts kmock
internals: `_handle`, `_serve_version`, `_lock`, `_requests`, `parsing.parse_path`). kmock
gives us request parsing, discovery and Status-shaped errors. On top of it, this module
implements API-server semantics that kopf, lightkube and kubectl rely on and kmock 0.8 lacks;
each fix is marked `FIX:` with why.

It keeps its own object store and watch fan-out instead of kmock's (a flat array of object
histories, deep-copied on every read, and a bus per resource): a gang of 512 pods written and
read back by an operator, the pod lifecycle and a watcher made those copies and per-watcher
JSON encodings the emulator's main cost. Here stored versions are immutable and encoded once
(see `Stored`), lists and gets touch one kind's index, and each watch event is one JSON line
written to every watcher that wants it.

The in-process API (`create`, `patch`, `delete`, `get`, `list_objects`) is what the lifecycle
simulator and `EmbeddedCluster` use; HTTP requests are routed to the same methods.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import functools
import gzip
import importlib.metadata
import importlib.resources
import json
import secrets
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import parsing as _kmock_parsing

from gem_operator.sim import admission
from gem_operator.sim.auth import require_bearer
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
PODS = Resource("", "v1", "pods")
CONFIGMAPS = Resource("", "v1", "configmaps")
# kube-apiserver's request-body limit (3 MiB) and a ConfigMap's data limit (1 MiB).
MAX_REQUEST_BYTES = 3 * 1024 * 1024
MAX_CONFIGMAP_BYTES = 1024 * 1024
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


def _error(status: int, reason: str, message: str, details: dict[str, Any] | None = None) -> ApiError:
    return ApiError(status=status, reason=reason, message=message, details=details or {"causes": []})


# What /version reports: a current Kubernetes (kmock's default is 1.26, long out of support).
SERVER_VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.1"}


def _clone(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars): ~3x faster than copy.deepcopy,
    which must track shared references and cycles that JSON documents cannot have."""
    kind = type(value)
    if kind is dict:
        return {k: _clone(v) for k, v in value.items()}
    if kind is list:
        return [_clone(v) for v in value]
    return value


def _encode(payload: Any) -> bytes:
    # default=str: a value YAML typed (a date in a fleet file) is a string to every API client.
    return json.dumps(payload, separators=(",", ":"), default=str).encode()


Key = tuple[Any, str | None, str]  # (resource, namespace or None, name)


class Stored:
    """One version of a stored object and, once asked for, its JSON encoding.

    Stored objects are never mutated: a write builds a new version, sharing the subtrees it
    does not change (a merge patch copies only the path it touches). So one version can be
    handed to every reader without a copy, and encoded once for every response, list and
    watch event that carries it, instead of deep-copying and encoding it per reader.
    """

    __slots__ = ("_json", "obj")

    def __init__(self, obj: Obj) -> None:
        self.obj = obj
        self._json: bytes | None = None

    @property
    def json(self) -> bytes:
        if self._json is None:
            self._json = _encode(self.obj)
        return self._json

    def copy(self) -> Obj:
        """A private deep copy for in-process callers: decoding the cached JSON is C-speed, but
        encoding only for this would cost more than a plain copy."""
        if self._json is None:
            cloned: Obj = _clone(self.obj)
            return cloned
        copied: Obj = json.loads(self._json)
        return copied


class WatchEvent:
    """An event of the watch log; its JSON line is built once and written to every watcher."""

    __slots__ = ("_line", "stored", "type")

    def __init__(self, type_: str, stored: Stored) -> None:
        self.type, self.stored = type_, stored
        self._line: bytes | None = None

    @property
    def obj(self) -> Obj:
        return self.stored.obj

    @property
    def line(self) -> bytes:
        if self._line is None:
            self._line = b'{"type":"' + self.type.encode() + b'","object":' + self.stored.json + b"}\n"
        return self._line


class Watcher:
    """One open watch: its filters, and the queue its events wait in until written out.

    Events are filtered as they are emitted, so an event no watcher wants costs nothing more.
    """

    __slots__ = ("fields", "labels", "name", "namespace", "queue")

    def __init__(self, namespace: str | None, name: str | None, labels: str | None, fields: str | None) -> None:
        self.namespace, self.name, self.fields = namespace, name, fields
        self.labels = parse_label_selector(labels) if labels else []
        self.queue: asyncio.Queue[WatchEvent] = asyncio.Queue()

    def matches(self, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.name is not None and meta.get("name") != self.name:
            return False
        if self.labels and not matches_labels(meta.get("labels") or {}, self.labels):
            return False
        return not self.fields or matches_fields(obj, self.fields)


def _owner_uids(obj: Obj) -> list[str]:
    return [str(r.get("uid")) for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("uid")]


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator with API-server semantics: see the module docstring."""

    _rv: int = attrs.field(default=0, init=False)
    _specs: dict[Any, ResourceSpec] = attrs.field(factory=dict, init=False)
    # kmock's resource registry matches keys through typing Protocols (slow per lookup); every
    # request asks several times, so known resources are remembered here.
    _infos: dict[Any, Any] = attrs.field(factory=dict, init=False)
    # The object store, indexed by resource then (namespace, name): a list or a get touches only
    # its own kind, never every object of the cluster (kmock's store is one flat array).
    _store: dict[Any, dict[tuple[str | None, str], Stored]] = attrs.field(factory=dict, init=False)
    _uids: dict[str, Key] = attrs.field(factory=dict, init=False)  # live objects by uid
    # owner uid -> its dependents (an ordered set), for the orphan check and garbage collection.
    _dependents: dict[str, dict[Key, None]] = attrs.field(factory=dict, init=False)
    _log: dict[Any, collections.deque[tuple[int, WatchEvent]]] = attrs.field(factory=dict, init=False)
    _log_floor: dict[Any, int] = attrs.field(factory=dict, init=False)
    _watchers: dict[Any, set[Watcher]] = attrs.field(factory=dict, init=False)
    listeners: list[ChangeListener] = attrs.field(factory=list, init=False)
    _schemas: dict[Any, admission.Schema | None] = attrs.field(factory=dict, init=False)
    # `kubectl logs`: (namespace, pod, container, previous) -> the output of a pod run as a process,
    # None when the pod is simulated (set by the process kubelet, sim/processes.py).
    pod_logs: Callable[[str, str, str | None, bool], str | None] | None = attrs.field(default=None, init=False)

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
        self._infos.pop(res, None)
        self._schemas.pop(res, None)
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
        info = self._infos.get(res)
        if info is not None:
            return info
        if res is None or not res.plural or res not in self.resources:
            raise _error(404, "NotFound", f"the server could not find the requested resource {res}")
        info = self._infos[res] = self.resources[res]
        return info

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

    def _admit(self, res: Any, obj: Obj, *, status: bool, strict: bool) -> Obj:
        """A custom resource as kube-apiserver stores it (pruned, defaulted, validated), or 422."""
        if res == CONFIGMAPS:
            size = sum(len(str(v).encode()) for part in ("data", "binaryData") for v in (obj.get(part) or {}).values())
            if size > MAX_CONFIGMAP_BYTES:
                name = (obj.get("metadata") or {}).get("name", "")
                raise _error(
                    422,
                    "Invalid",
                    f'ConfigMap "{name}" is invalid: []: Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes',
                )
            return obj
        if res not in self._schemas:
            spec = self._specs.get(res)
            self._schemas[res] = admission.Schema(spec.schema) if spec is not None and spec.schema else None
        schema = self._schemas[res]
        if schema is None:
            return obj
        try:
            return schema.admit(obj, status=status, strict=strict)
        except admission.Invalid as exc:
            info = self.info(res)
            name = (obj.get("metadata") or {}).get("name", "")
            shown = ", ".join(f"{f}: {m}" for f, m in exc.causes[:10])
            more = f" and {len(exc.causes) - 10} more" if len(exc.causes) > 10 else ""
            causes = [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in exc.causes]
            details = {"name": name, "group": res.group, "kind": info.kind, "causes": causes}
            message = f'{info.kind}.{res.group} "{name}" is invalid: {shown}{more}'
            raise _error(422, "Invalid", message, details) from None

    def _has_status(self, res: Any) -> bool:
        return "status" in self.info(res).subresources

    # -- reading -----------------------------------------------------------------------------------

    def _stored(self, res: Any, namespace: str | None, name: str) -> Stored | None:
        return self._store.get(res, {}).get((namespace if self.info(res).namespaced else None, name))

    def get_object(self, res: Any, namespace: str | None, name: str) -> Obj | None:
        """The current object or None; a deep copy, safe to mutate."""
        stored = self._stored(res, namespace, name)
        return None if stored is None else stored.copy()

    def _select(
        self, res: Any, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> list[Stored]:
        requirements = parse_label_selector(labels) if labels else []
        result: list[Stored] = []
        for (key_ns, _), stored in self._store.get(res, {}).items():
            if namespace is not None and key_ns != namespace:
                continue
            raw = stored.obj
            if requirements and not matches_labels((raw.get("metadata") or {}).get("labels") or {}, requirements):
                continue
            if not fields or matches_fields(raw, fields):
                result.append(stored)
        return result

    def list_objects(
        self,
        res: Any,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[Obj]:
        """Matching objects, oldest first; deep copies, safe to mutate."""
        return [stored.copy() for stored in self._select(res, namespace, labels=labels, fields=fields)]

    def list_shared(self, res: Any, namespace: str | None = None, *, labels: str | None = None) -> list[Obj]:
        """Matching objects as stored, without copies, oldest first.

        What an informer's lister hands kube-scheduler and the kubelet: the cache's own objects,
        which they must never mutate (build a new dict to change one, and write it through the
        API). The pod lifecycle reads every pod and node on each pass; copying them all made it
        the emulator's main cost under a 512-pod gang.
        """
        return [stored.obj for stored in self._select(res, namespace, labels=labels)]

    @property
    def resource_version(self) -> int:
        return self._rv

    # -- writing -----------------------------------------------------------------------------------
    # The store holds immutable versions (see `Stored`): every write below builds a new top-level
    # dict and a new `metadata` dict before changing them, and never mutates what it read.

    def _put(self, key: Key, obj: Obj | None) -> Stored | None:
        """Store a version (None: remove) and keep the uid and owner indexes in step."""
        res, namespace, name = key
        objects = self._store.setdefault(res, {})
        old = objects.get((namespace, name))
        if old is not None:
            self._uids.pop(str(old.obj["metadata"].get("uid")), None)
            for owner in _owner_uids(old.obj):
                dependents = self._dependents.get(owner)
                if dependents is not None:
                    dependents.pop(key, None)
                    if not dependents:
                        del self._dependents[owner]
        if obj is None:
            objects.pop((namespace, name), None)
            return None
        stored = objects[(namespace, name)] = Stored(obj)
        self._uids[str(obj["metadata"].get("uid"))] = key
        for owner in _owner_uids(obj):
            self._dependents.setdefault(owner, {})[key] = None
        return stored

    async def _emit(self, res: Any, kind: str, stored: Stored) -> None:
        # FIX: kmock streams events without resourceVersions and keeps no history, so a
        # list-then-watch client (kopf, lightkube) loses events that happen in between. We keep
        # a bounded per-resource log so `?watch=true&resourceVersion=N` resumes after N.
        event = WatchEvent(kind, stored)
        log = self._log.setdefault(res, collections.deque(maxlen=WATCH_LOG_SIZE))
        if len(log) == log.maxlen:
            self._log_floor[res] = log[0][0]
        log.append((self._rv, event))
        for watcher in self._watchers.get(res, ()):
            if watcher.matches(stored.obj):
                watcher.queue.put_nowait(event)
        for listener in list(self.listeners):
            listener(kind, res, stored.obj)  # the stored version: listeners must not mutate it

    def _bump(self, obj: Obj) -> None:
        """Give a new version (whose `metadata` dict is its own) the next resourceVersion."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    async def create_object(
        self, res: Any, obj: Obj, namespace: str | None = None, *, keep_status: bool = False
    ) -> Obj:
        """Store a new object as the API server would: ids, timestamps, generation, defaults."""
        if not isinstance(obj, dict):
            raise _error(400, "BadRequest", "the body must be a JSON object")
        return (await self._create(res, _clone(obj), namespace, keep_status=keep_status)).copy()

    async def _create(
        self, res: Any, obj: Obj, namespace: str | None, *, keep_status: bool = False, strict: bool = False
    ) -> Stored:
        """`create_object` on a body the emulator may keep as it is (parsed from a request)."""
        info = self.info(res)
        if not isinstance(obj, dict):
            raise _error(400, "BadRequest", "the body must be a JSON object")
        meta = obj["metadata"] = dict(obj.get("metadata") or {})
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
        obj = self._admit(res, obj, status=keep_status, strict=strict)
        meta = obj["metadata"]
        async with self._lock:
            key: Key = (res, namespace, meta["name"])
            if (namespace, meta["name"]) in self._store.get(res, {}):
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
            stored = self._put(key, obj)
            assert stored is not None
            await self._emit(res, "ADDED", stored)
            if self._orphaned(obj):
                # FIX: as the real garbage collector, collect a dependent whose owners are all gone
                # (e.g. created by a controller racing with its owner's deletion).
                await self._remove(key)
                await self._collect_garbage(meta["uid"])
        if res == CRD_RESOURCE:
            for spec in crd_resources(obj):
                self.register(spec)
        return stored

    def _defaults(self, res: Any, obj: Obj) -> None:
        """The few server-side defaults our clients read back (on a version not yet stored)."""
        if res == PODS:
            obj["status"] = {"phase": "Pending", **(obj.get("status") or {})}
            obj["spec"] = {"restartPolicy": "Always", **(obj.get("spec") or {})}
        elif res == NAMESPACES:
            obj["status"] = {"phase": "Active", **(obj.get("status") or {})}
        elif res.group == "apps" and res.plural in ("deployments", "statefulsets", "replicasets"):
            obj["spec"] = {"replicas": 1, **(obj.get("spec") or {})}

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
        body = _clone(body)
        stored = await self._patch(
            res, namespace, name, body, patch_type=patch_type, subresource=subresource, replace=replace
        )
        return stored.copy()

    async def _patch(
        self,
        res: Any,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        replace: bool = False,
        strict: bool = False,
    ) -> Stored:
        """`patch_object` with a body the emulator may keep (parsed from a request)."""
        info = self.info(res)
        namespace = namespace if info.namespaced else None
        key: Key = (res, namespace, name)
        if subresource not in (None, "status", "scale") or (
            subresource is not None and subresource not in info.subresources
        ):
            raise _error(404, "NotFound", f"the server could not find the requested resource ({subresource})")
        async with self._lock:
            current = self._store.get(res, {}).get((namespace, name))
            if current is None:
                raise _error(404, "NotFound", f'{res.plural} "{name}" not found')
            old: Obj = current.obj
            if subresource == "scale":
                body = self._scale_to_patch(res, body)
            try:
                if replace:
                    new = dict(body) if isinstance(body, dict) else {}
                elif patch_type == "json":
                    new = json_patch(old, body)  # works on its own deep copy
                else:
                    new = merge_patch(old, body)  # shares what the patch leaves alone
            except PatchError as exc:
                # FIX: kmock answers a failed JSON-patch `test` (or any bad op) with 500; the
                # API server says 422 Invalid, which clients treat as "precondition failed".
                raise _error(422, "Invalid", str(exc)) from exc
            if not isinstance(new, dict):
                raise _error(422, "Invalid", "the patched object is not a JSON object")
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if wanted_rv and wanted_rv != old["metadata"].get("resourceVersion"):
                raise _error(409, "Conflict", "the object has been modified; please apply your changes")
            new = self._guard(res, old, new, subresource)
            new = self._admit(res, new, status=subresource == "status", strict=strict)
            if new == old:
                return current  # a no-op write changes nothing and emits nothing, as the API server
            self._bump(new)
            meta = new["metadata"]
            stored = self._put(key, new)
            assert stored is not None
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                await self._remove(key)
                await self._collect_garbage(meta["uid"])
            else:
                await self._emit(res, "MODIFIED", stored)
        return stored

    def _guard(self, res: Any, old: Obj, new: Obj, subresource: str | None) -> Obj:
        """Keep what a client cannot change: identity, status vs spec split, generation."""
        new = dict(new)
        new["metadata"] = dict(new.get("metadata") or {})  # may be shared with `old`: our own copy
        if self._has_status(res):
            # FIX: kmock merges everything everywhere. With a status subresource, a write to
            # /status changes only `status`, and a write to the object leaves `status` alone.
            if subresource == "status":
                new = {**old, "metadata": dict(old["metadata"]), "status": new.get("status")}
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
            "status": {"replicas": dotted(obj, status_path) or 0, **self._scale_selector(res, obj)},
        }

    def _scale_selector(self, res: Any, obj: Obj) -> Obj:
        spec = self._specs.get(res)
        if spec is None or spec.label_selector_path is None:
            return {}
        selector = dotted(obj, spec.label_selector_path)
        return {"selector": selector} if selector else {}

    async def delete_object(self, res: Any, namespace: str | None, name: str, *, orphan: bool = False) -> Obj:
        """Delete now, or mark for deletion while finalizers remain; then collect dependents."""
        return (await self._delete(res, namespace, name, orphan=orphan)).copy()

    async def _delete(self, res: Any, namespace: str | None, name: str, *, orphan: bool = False) -> Stored:
        info = self.info(res)
        key: Key = (res, namespace if info.namespaced else None, name)
        async with self._lock:
            current = self._store.get(res, {}).get(key[1:])
            if current is None:
                raise _error(404, "NotFound", f'{res.plural} "{name}" not found')
            meta = current.obj["metadata"]
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return current
                marked = self._marked(current.obj)
                stored = self._put(key, marked)
                assert stored is not None
                await self._emit(res, "MODIFIED", stored)
                return stored
            removed = await self._remove(key)
            if not orphan:
                await self._collect_garbage(meta["uid"])
                if res == NAMESPACES:
                    await self._delete_namespace_contents(name)
        return removed

    def _marked(self, obj: Obj) -> Obj:
        """A new version marked for deletion (finalizers hold it until they are removed)."""
        marked = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": _now()}}
        self._bump(marked)
        return marked

    async def _remove(self, key: Key) -> Stored:
        current = self._store[key[0]][key[1:]]
        gone = {**current.obj, "metadata": dict(current.obj["metadata"])}
        self._bump(gone)
        self._put(key, None)
        stored = Stored(gone)
        await self._emit(key[0], "DELETED", stored)
        return stored

    def _orphaned(self, obj: Obj) -> bool:
        refs = _owner_uids(obj)
        return bool(refs) and not any(uid in self._uids for uid in refs)

    async def _collect_garbage(self, uid: str) -> None:
        """FIX: kmock has no garbage collector. Deleting an owner deletes (cascading) every
        object whose ownerReferences name its uid, as the background GC of Kubernetes does;
        dependents with finalizers are only marked for deletion. Runs under the store lock."""
        pending = [uid]
        while pending:
            owner = pending.pop()
            for key in list(self._dependents.get(owner, ())):
                current = self._store.get(key[0], {}).get(key[1:])
                if current is None or not owned_by(current.obj, owner):
                    continue
                if current.obj["metadata"].get("finalizers"):
                    if not current.obj["metadata"].get("deletionTimestamp"):
                        stored = self._put(key, self._marked(current.obj))
                        assert stored is not None
                        await self._emit(key[0], "MODIFIED", stored)
                    continue
                removed = await self._remove(key)
                pending.append(removed.obj["metadata"]["uid"])

    async def _delete_namespace_contents(self, namespace: str) -> None:
        keys = [(res, ns, name) for res, objects in self._store.items() for (ns, name) in objects if ns == namespace]
        for key in keys:
            if key[1:] in self._store.get(key[0], {}):  # not collected with an earlier owner
                removed = await self._remove(key)
                await self._collect_garbage(removed.obj["metadata"]["uid"])

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
            return self._list_response(request)
        if method == "GET" and res == PODS and request.subresource == "log":
            return self._pod_log(request.namespace, request.name, params)
        if method == "GET":
            stored = self._stored(res, request.namespace, request.name)
            if stored is None:
                raise _error(404, "NotFound", f'{res.plural} "{request.name}" not found')
            if request.subresource is None and admission.wants_table(request.headers.get("Accept", "")):
                return self._table(res, [stored])
            return self._answer(stored, request)
        strict = params.get("fieldValidation") == "Strict"
        if "protobuf" in request.headers.get("Content-Type", ""):
            # Typed kubectl generators (`kubectl create configmap`) send protobuf; the emulator
            # speaks JSON only. 415 tells the client so (use `kubectl create -f` instead).
            raise _error(415, "UnsupportedMediaType", "the emulator accepts JSON bodies only")
        try:
            body = json.loads(request.body) if request.body else {}
        except ValueError as exc:
            raise _error(400, "BadRequest", f"the body is not valid JSON: {exc}") from exc
        except RecursionError:
            raise _error(422, "Invalid", "the body is nested too deeply to decode") from None
        if method == "POST" and request.name is None:
            return self._answer(await self._create(res, body, request.namespace, strict=strict), request, status=201)
        if method in ("PATCH", "PUT") and request.name is not None:
            content_type = request.headers.get("Content-Type", "")
            if "apply-patch" in content_type:
                raise _error(415, "UnsupportedMediaType", "server-side apply is not supported by the emulator")
            stored = await self._patch(
                res,
                request.namespace,
                request.name,
                body,
                patch_type="json" if "json-patch" in content_type else "merge",
                subresource=request.subresource,
                replace=method == "PUT" and request.subresource != "scale",
                strict=strict,
            )
            return self._answer(stored, request)
        if method == "DELETE" and request.name is not None:
            orphan = isinstance(body, dict) and body.get("propagationPolicy") == "Orphan"
            orphan = orphan or params.get("propagationPolicy") == "Orphan"
            return self._answer(await self._delete(res, request.namespace, request.name, orphan=orphan), request)
        raise _error(405, "MethodNotAllowed", f"{method} is not supported on this path by the emulator")

    def _pod_log(self, namespace: str, name: str, params: dict[str, str]) -> aiohttp.web.StreamResponse:
        """Plain-text container output, as the kubelet serves it: never the pod's JSON."""
        if self._stored(PODS, namespace, name) is None:
            raise _error(404, "NotFound", f'pods "{name}" not found')
        try:
            text = self.pod_logs(namespace, name, params.get("container"), params.get("previous") == "true") \
                if self.pod_logs is not None else None  # fmt: skip
        except LookupError as exc:
            raise _error(400, "BadRequest", str(exc)) from exc
        if text is None:
            raise _error(
                400, "BadRequest", f"pod {name} is simulated by the embedded cluster: its containers never ran, "
                "so it has no logs (pods run as processes with `gemop sim up --run-pods`)"
            )  # fmt: skip
        if params.get("tailLines", "").isdigit():
            text = "".join(text.splitlines(keepends=True)[-int(params["tailLines"]) :])
        return aiohttp.web.Response(text=text, content_type="text/plain")

    def _answer(self, stored: Stored, request: Any, status: int = 200) -> aiohttp.web.StreamResponse:
        if request.subresource == "scale":
            return self._raw_json(_encode(self.scale_of(request.resource, stored.obj)), status)
        return self._raw_json(stored.json, status)

    @staticmethod
    def _raw_json(body: bytes, status: int = 200) -> aiohttp.web.StreamResponse:
        return aiohttp.web.Response(body=body, status=status, content_type="application/json")

    def _table(self, res: Any, items: list[Stored]) -> aiohttp.web.StreamResponse:
        spec = self._specs.get(res)
        columns = spec.printer_columns if spec is not None else ()
        if not columns:  # built-in kinds: Name and Age, as the API server's default table
            columns = ({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},)
        body = admission.table([s.obj for s in items], columns, str(self._rv))
        return self._raw_json(_encode(body))

    def _list_response(self, request: Any) -> aiohttp.web.StreamResponse:
        res = request.resource
        params = request.params
        items = self._select(
            res,
            request.namespace,
            labels=params.get("labelSelector"),
            fields=params.get("fieldSelector"),
        )
        if admission.wants_table(request.headers.get("Accept", "")):
            return self._table(res, items)
        # FIX: kmock's lists lack kind/apiVersion and a real resourceVersion; lightkube and
        # kubectl decode by kind, and list-then-watch needs the version to resume from.
        head = _encode(
            {
                "apiVersion": api_version_of(res),
                "kind": f"{self.info(res).kind}List",
                "metadata": {"resourceVersion": str(self._rv)},
            }
        )
        # The cached encodings of the items, spliced into the envelope: no per-list encoding.
        return self._raw_json(head[:-1] + b',"items":[' + b",".join(s.json for s in items) + b"]}")

    async def _watch(self, request: Any) -> aiohttp.web.StreamResponse:
        """Stream watch events as JSON lines, resuming after `resourceVersion` when given."""
        res = request.resource
        params = request.params
        watcher = Watcher(request.namespace, request.name, params.get("labelSelector"), params.get("fieldSelector"))
        since = params.get("resourceVersion") or ""
        timeout = float(params.get("timeoutSeconds") or 0) or None
        initial: list[WatchEvent] = []
        expired = False
        async with self._lock:  # the snapshot and the subscription must see the same moment
            if since.isdigit() and int(since) > 0:
                if int(since) < self._log_floor.get(res, 0):
                    expired = True
                else:
                    initial = [ev for rv, ev in self._log.get(res, ()) if rv > int(since)]
            else:
                initial = [WatchEvent("ADDED", s) for s in self._select(res, request.namespace)]
            if not expired:
                self._watchers.setdefault(res, set()).add(watcher)
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(request._raw_request)
            if expired:  # 410 Gone: the client must list again
                gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410}
                error = {"type": "ERROR", "object": {**gone, "reason": "Expired", "message": "too old"}}
                await response.write(_encode(error) + b"\n")
                return response
            chunk = b"".join(ev.line for ev in initial if watcher.matches(ev.obj))
            if chunk:
                await response.write(chunk)
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while deadline is None or loop.time() < deadline:
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), remaining)
                except TimeoutError:
                    break
                lines = [event.line]
                while not watcher.queue.empty():  # a burst: one write for all that is waiting
                    lines.append(watcher.queue.get_nowait().line)
                await response.write(b"".join(lines))
        except ConnectionResetError:  # the client went away
            pass
        finally:
            self._watchers.get(res, set()).discard(watcher)
        return response

    async def _serve_server_version(self, request: Any) -> Any:
        payload: Any = await super()._serve_server_version(request)
        payload.update(SERVER_VERSION, buildDate="2025-05-15T00:00:00Z", goVersion="go1.24.2")
        return payload

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
        if request.can_read_body and admission.json_too_deep(await request.read()):
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "code": 422,
                "reason": "Invalid",
                "message": "the body is nested too deeply to decode",
            }
            return aiohttp.web.Response(status=422, body=_encode(status), content_type="application/json")
        response = await handler(request)
        if not response.prepared and response.content_type == "application/json":
            response.headers["Content-Type"] = "application/json"
        return response

    return wrapped


async def start_http(
    emulator: Emulator, host: str = "127.0.0.1", port: int = 0, token: str | None = None
) -> tuple[aiohttp.web.BaseRunner, str]:
    """Serve the emulator on a real TCP port; returns the runner (to clean up) and the URL.

    With ``token``, requests must bear it (``sim/auth.py``)."""
    handler = _plain_json(emulator)
    if token is not None:
        handler = require_bearer(token, handler)

    # handler_cancellation: a client that drops a watch must end its streaming handler.
    def request_factory(*args: Any) -> aiohttp.web.BaseRequest:
        request = server._make_request(*args)
        request._client_max_size = MAX_REQUEST_BYTES  # aiohttp's default is 1 MiB
        return request

    server = aiohttp.web.Server(handler, handler_cancellation=True, access_log=None, request_factory=request_factory)
    runner = aiohttp.web.ServerRunner(server, shutdown_timeout=1.0)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    url_host = "127.0.0.1" if bound_host in ("0.0.0.0", "::") else bound_host
    return runner, f"http://{url_host}:{bound_port}"
