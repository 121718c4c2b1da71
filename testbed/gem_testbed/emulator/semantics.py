"""API-server semantics over the emulator's store: what kmock 0.8 lacks and clients rely on.

Create (ids, timestamps, generation, server-side defaults, generateName), merge/JSON patch and
replace with the status/spec split and optimistic concurrency, the `scale` subresource, delete
with finalizers, cascading garbage collection through ownerReferences, and admission of custom
resources against their CRD schema (pruning, defaulting, validation: `admission`). Each fix over
kmock is marked `FIX:` with why.
"""

from __future__ import annotations

import datetime
import secrets
import uuid
from typing import Any

import attrs

from gem_testbed.emulator import admission
from gem_testbed.emulator.crds import crd_resources
from gem_testbed.emulator.objects import Obj, PatchError, dotted, json_patch, merge_patch, owned_by
from gem_testbed.emulator.registry import (
    CONFIGMAPS,
    CRD_RESOURCE,
    MAX_CONFIGMAP_BYTES,
    NAMESPACES,
    PODS,
    api_error,
    api_version_of,
)
from gem_testbed.emulator.store import Key, ObjectStore, Stored, clone_json, owner_uids


def now_timestamp() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define(kw_only=True)
class ApiSemantics(ObjectStore):
    """The store written as the API server writes: see the module docstring."""

    # -- admission ---------------------------------------------------------------------------------

    def _admit(self, res: Any, obj: Obj, *, status: bool, strict: bool) -> Obj:
        """A custom resource as kube-apiserver stores it (pruned, defaulted, validated), or 422."""
        if res == CONFIGMAPS:
            size = sum(len(str(v).encode()) for part in ("data", "binaryData") for v in (obj.get(part) or {}).values())
            if size > MAX_CONFIGMAP_BYTES:
                name = (obj.get("metadata") or {}).get("name", "")
                raise api_error(
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
        except admission.Undecodable as exc:
            kind = self.info(res).kind
            message = f'{kind} in version "{res.version}" cannot be handled as a {kind}: {exc}'
            raise api_error(400, "BadRequest", message) from None
        except admission.Invalid as exc:
            info = self.info(res)
            name = (obj.get("metadata") or {}).get("name", "")
            shown = ", ".join(f"{f}: {m}" for f, m in exc.causes[:10])
            more = f" and {len(exc.causes) - 10} more" if len(exc.causes) > 10 else ""
            shown = f"[{shown}{more}]" if len(exc.causes) > 1 else shown
            causes = [{"reason": admission.cause_reason(m), "message": m, "field": f} for f, m in exc.causes]
            details = {"name": name, "group": res.group, "kind": info.kind, "causes": causes}
            message = f'{info.kind}.{res.group} "{name}" is invalid: {shown}'
            raise api_error(422, "Invalid", message, details) from None

    def _has_status(self, res: Any) -> bool:
        return "status" in self.info(res).subresources

    # -- create ------------------------------------------------------------------------------------

    async def create_object(
        self, res: Any, obj: Obj, namespace: str | None = None, *, keep_status: bool = False
    ) -> Obj:
        """Store a new object as the API server would: ids, timestamps, generation, defaults."""
        if not isinstance(obj, dict):
            raise api_error(400, "BadRequest", "the body must be a JSON object")
        return (await self._create(res, clone_json(obj), namespace, keep_status=keep_status)).copy()

    async def _create(
        self, res: Any, obj: Obj, namespace: str | None, *, keep_status: bool = False, strict: bool = False
    ) -> Stored:
        """`create_object` on a body the emulator may keep as it is (parsed from a request)."""
        info = self.info(res)
        if not isinstance(obj, dict):
            raise api_error(400, "BadRequest", "the body must be a JSON object")
        meta = obj["metadata"] = dict(obj.get("metadata") or {})
        if namespace and meta.get("namespace") not in (None, namespace):
            raise api_error(400, "BadRequest", "the namespace of the object does not match the URL")
        namespace = (namespace or meta.get("namespace") or None) if info.namespaced else None
        if info.namespaced and not namespace:
            raise api_error(400, "BadRequest", "a namespace is required for namespaced resources")
        if not meta.get("name") and meta.get("generateName"):
            alphabet = "bcdfghjklmnpqrstvwxz2456789"
            meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
        if not meta.get("name"):
            raise api_error(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        obj = self._admit(res, obj, status=keep_status, strict=strict)
        meta = obj["metadata"]
        async with self._lock:
            key: Key = (res, namespace, meta["name"])
            if (namespace, meta["name"]) in self._store.get(res, {}):
                raise api_error(409, "AlreadyExists", f'{res.plural} "{meta["name"]}" already exists')
            obj["apiVersion"] = api_version_of(res)
            obj["kind"] = info.kind
            if namespace:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            # FIX: kmock sets none of these; kopf, lightkube and garbage collection need them.
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_timestamp()
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

    # -- patch and scale ---------------------------------------------------------------------------

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
        body = clone_json(body)
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
            raise api_error(404, "NotFound", f"the server could not find the requested resource ({subresource})")
        async with self._lock:
            current = self._store.get(res, {}).get((namespace, name))
            if current is None:
                raise api_error(404, "NotFound", f'{res.plural} "{name}" not found')
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
                raise api_error(422, "Invalid", str(exc)) from exc
            if not isinstance(new, dict):
                raise api_error(422, "Invalid", "the patched object is not a JSON object")
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if wanted_rv and wanted_rv != old["metadata"].get("resourceVersion"):
                raise api_error(409, "Conflict", "the object has been modified; please apply your changes")
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
            raise api_error(422, "Invalid", "spec.replicas: must be a non-negative integer")
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

    # -- delete and garbage collection -------------------------------------------------------------

    async def delete_object(self, res: Any, namespace: str | None, name: str, *, orphan: bool = False) -> Obj:
        """Delete now, or mark for deletion while finalizers remain; then collect dependents."""
        return (await self._delete(res, namespace, name, orphan=orphan)).copy()

    async def _delete(self, res: Any, namespace: str | None, name: str, *, orphan: bool = False) -> Stored:
        info = self.info(res)
        key: Key = (res, namespace if info.namespaced else None, name)
        async with self._lock:
            current = self._store.get(res, {}).get(key[1:])
            if current is None:
                raise api_error(404, "NotFound", f'{res.plural} "{name}" not found')
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
            if orphan:
                await self._orphan_dependents(meta["uid"])
            else:
                await self._collect_garbage(meta["uid"])
                if res == NAMESPACES:
                    await self._delete_namespace_contents(name)
        return removed

    def _marked(self, obj: Obj) -> Obj:
        """A new version marked for deletion (finalizers hold it until they are removed)."""
        marked = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": now_timestamp()}}
        self._bump(marked)
        return marked

    def _orphaned(self, obj: Obj) -> bool:
        refs = owner_uids(obj)
        return bool(refs) and not any(uid in self._uids for uid in refs)

    async def _orphan_dependents(self, uid: str) -> None:
        """Orphan deletion, as the garbage collector does it: the dependents stay, without the owner
        reference to the deleted object (each such change is a new version, with its watch event)."""
        for key in list(self._dependents.get(uid, ())):
            current = self._store.get(key[0], {}).get(key[1:])
            if current is None or not owned_by(current.obj, uid):
                continue
            meta = current.obj["metadata"]
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != uid]
            kept = {**current.obj, "metadata": {**meta, "ownerReferences": refs}}
            if not refs:
                kept["metadata"].pop("ownerReferences")
            self._bump(kept)
            stored = self._put(key, kept)
            assert stored is not None
            await self._emit(key[0], "MODIFIED", stored)

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
