"""The emulator's object store and watch fan-out, in place of kmock's own.

kmock keeps a flat array of object histories, deep-copied on every read, and a bus per resource:
a gang of 512 pods written and read back by an operator, the pod lifecycle and a watcher made
those copies and per-watcher JSON encodings the emulator's main cost. Here stored versions are
immutable and encoded once (see `Stored`), lists and gets touch one kind's index, and each watch
event is one JSON line written to every watcher that wants it. A bounded per-resource event log
lets a watch resume after a resourceVersion.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable
from typing import Any

import attrs

from gem_testbed.emulator.objects import Obj, matches_fields, matches_labels, parse_label_selector
from gem_testbed.emulator.registry import ResourceRegistry

ChangeListener = Callable[[str, Any, Obj], None]
WATCH_LOG_SIZE = 1024


def clone_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars): ~3x faster than copy.deepcopy,
    which must track shared references and cycles that JSON documents cannot have."""
    kind = type(value)
    if kind is dict:
        return {k: clone_json(v) for k, v in value.items()}
    if kind is list:
        return [clone_json(v) for v in value]
    return value


def encode_json(payload: Any) -> bytes:
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
            self._json = encode_json(self.obj)
        return self._json

    def copy(self) -> Obj:
        """A private deep copy for in-process callers: decoding the cached JSON is C-speed, but
        encoding only for this would cost more than a plain copy."""
        if self._json is None:
            cloned: Obj = clone_json(self.obj)
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


def owner_uids(obj: Obj) -> list[str]:
    return [str(r.get("uid")) for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("uid")]


@attrs.define(kw_only=True)
class ObjectStore(ResourceRegistry):
    """The registry plus the store: immutable versions indexed by resource, uid and owner."""

    _rv: int = attrs.field(default=0, init=False)
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
            for owner in owner_uids(old.obj):
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
        for owner in owner_uids(obj):
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

    async def _remove(self, key: Key) -> Stored:
        current = self._store[key[0]][key[1:]]
        gone = {**current.obj, "metadata": dict(current.obj["metadata"])}
        self._bump(gone)
        self._put(key, None)
        stored = Stored(gone)
        await self._emit(key[0], "DELETED", stored)
        return stored
