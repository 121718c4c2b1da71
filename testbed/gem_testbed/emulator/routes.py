"""HTTP routing of the emulator: requests onto the store and semantics, and the TCP server.

Requests arrive parsed by kmock; resource requests are routed here to the in-process methods
(list, get, watch, create, patch, delete, `scale`, pod logs, server-side tables for kubectl),
discovery and non-resource paths go to kmock's scaffold with the fixes clients need. Each fix
over kmock is marked `FIX:` with why.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import parsing as _kmock_parsing

from gem_testbed.emulator import admission
from gem_testbed.emulator.auth import require_bearer
from gem_testbed.emulator.registry import MAX_REQUEST_BYTES, PODS, api_error, api_version_of
from gem_testbed.emulator.semantics import ApiSemantics
from gem_testbed.emulator.store import Stored, Watcher, WatchEvent, encode_json

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


# What /version reports: a current Kubernetes (kmock's default is 1.26, long out of support).
SERVER_VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.1"}


@attrs.define(kw_only=True)
class Emulator(ApiSemantics):
    """The Kubernetes API emulator: kmock's emulator with API-server semantics (see `registry`)."""

    # `kubectl logs`: (namespace, pod, container, previous) -> the output of a pod run as a process,
    # None when the pod is simulated (set by the process kubelet, kubelets/processes.py).
    pod_logs: Callable[[str, str, str | None, bool], str | None] | None = attrs.field(default=None, init=False)

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
            raise api_error(400, "BadRequest", str(exc)) from exc

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
                raise api_error(404, "NotFound", f'{res.plural} "{request.name}" not found')
            if request.subresource is None and admission.wants_table(request.headers.get("Accept", "")):
                return self._table(res, [stored])
            return self._answer(stored, request)
        strict = params.get("fieldValidation") == "Strict"
        if "protobuf" in request.headers.get("Content-Type", ""):
            # Typed kubectl generators (`kubectl create configmap`) send protobuf; the emulator
            # speaks JSON only. 415 tells the client so (use `kubectl create -f` instead).
            raise api_error(415, "UnsupportedMediaType", "the emulator accepts JSON bodies only")
        try:
            body = json.loads(request.body) if request.body else {}
        except ValueError as exc:
            raise api_error(400, "BadRequest", f"the body is not valid JSON: {exc}") from exc
        except RecursionError:
            raise api_error(422, "Invalid", "the body is nested too deeply to decode") from None
        if method == "POST" and request.name is None:
            return self._answer(await self._create(res, body, request.namespace, strict=strict), request, status=201)
        if method in ("PATCH", "PUT") and request.name is not None:
            content_type = request.headers.get("Content-Type", "")
            if "apply-patch" in content_type:
                raise api_error(415, "UnsupportedMediaType", "server-side apply is not supported by the emulator")
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
        raise api_error(405, "MethodNotAllowed", f"{method} is not supported on this path by the emulator")

    def _pod_log(self, namespace: str, name: str, params: dict[str, str]) -> aiohttp.web.StreamResponse:
        """Plain-text container output, as the kubelet serves it: never the pod's JSON."""
        if self._stored(PODS, namespace, name) is None:
            raise api_error(404, "NotFound", f'pods "{name}" not found')
        try:
            text = self.pod_logs(namespace, name, params.get("container"), params.get("previous") == "true") \
                if self.pod_logs is not None else None  # fmt: skip
        except LookupError as exc:
            raise api_error(400, "BadRequest", str(exc)) from exc
        if text is None:
            raise api_error(
                400, "BadRequest", f"pod {name} is simulated by the embedded cluster: its containers never ran, "
                "so it has no logs (pods run as processes with `gemop sim up --run-pods`)"
            )  # fmt: skip
        if params.get("tailLines", "").isdigit():
            text = "".join(text.splitlines(keepends=True)[-int(params["tailLines"]) :])
        return aiohttp.web.Response(text=text, content_type="text/plain")

    def _answer(self, stored: Stored, request: Any, status: int = 200) -> aiohttp.web.StreamResponse:
        if request.subresource == "scale":
            return self._raw_json(encode_json(self.scale_of(request.resource, stored.obj)), status)
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
        return self._raw_json(encode_json(body))

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
        head = encode_json(
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
                await response.write(encode_json(error) + b"\n")
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
        # As kube-apiserver lists a group served by CRDs: by resource name, which is the order
        # `kubectl get <category>` prints them in (kmock keeps registration order, reversed).
        if request.resource is not None and any(res.group == request.resource.group for res in self._specs):
            payload["resources"] = sorted(payload.get("resources") or [], key=lambda e: str(e.get("name", "")))
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
            return aiohttp.web.Response(status=422, body=encode_json(status), content_type="application/json")
        response = await handler(request)
        if not response.prepared and response.content_type == "application/json":
            response.headers["Content-Type"] = "application/json"
        return response

    return wrapped


async def start_http(
    emulator: Emulator, host: str = "127.0.0.1", port: int = 0, token: str | None = None
) -> tuple[aiohttp.web.BaseRunner, str]:
    """Serve the emulator on a real TCP port; returns the runner (to clean up) and the URL.

    With ``token``, requests must bear it (``auth.py``)."""
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
