"""`gem-load serve`: share a node cache's verified entries with peers over HTTP Range.

Why: when hundreds of nodes start the same model, most bytes can come from nodes that
already hold it instead of the object store. Only entries with a verified marker are
served; the client still verifies every byte against its manifest, so a stale or corrupt
peer costs a fallback, never a wrong model. aiohttp's FileResponse does the Range, HEAD,
ETag and sendfile work.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from aiohttp import web

from gem_workloads.loader.cache import VERIFIED_NAME
from gem_workloads.loader.errors import LoaderError
from gem_workloads.loader.manifest import RESERVED_PREFIX

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def make_app(cache_root: Path) -> web.Application:
    models = (cache_root / "models").resolve()

    async def get_file(request: web.Request) -> web.StreamResponse:
        digest, rel = request.match_info["digest"], request.match_info["path"]
        if not _DIGEST.match(digest):
            raise web.HTTPBadRequest(text="digest must be 64 hex digits\n")
        entry = models / digest
        if not (entry / VERIFIED_NAME).is_file():
            raise web.HTTPNotFound(text=f"model {digest} is not in this cache\n")
        target = (entry / rel).resolve()
        if not target.is_relative_to(entry) or any(p.startswith(RESERVED_PREFIX) for p in Path(rel).parts):
            raise web.HTTPForbidden(text="path outside the model\n")
        if not target.is_file():
            raise web.HTTPNotFound(text=f"{rel} not in model {digest}\n")
        return web.FileResponse(target)

    async def list_models(request: web.Request) -> web.Response:
        names = sorted(d.name for d in models.iterdir() if (d / VERIFIED_NAME).is_file()) if models.is_dir() else []
        return web.json_response({"models": names})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/models/{digest}/{path:.+}", get_file)  # GET also answers HEAD
    app.router.add_get("/models", list_models)
    app.router.add_get("/healthz", healthz)
    return app


def serve(cache_root: Path, host: str, port: int) -> None:
    """Serve until stopped; a cache directory it cannot make, a port in use or a host that does
    not resolve is a :class:`LoaderError` naming the argument (exit 1), not a traceback."""
    try:
        (cache_root / "models").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LoaderError(f"CACHE_DIR: cannot use {cache_root}: {e.strerror or e}") from None
    try:
        web.run_app(make_app(cache_root), host=host, port=port, print=None, access_log=None)
    except socket.gaierror as e:
        raise LoaderError(f"--host: cannot resolve {host!r}: {e.strerror or e}") from None
    except OSError as e:  # bind: address in use, or not an address of this machine
        raise LoaderError(f"--host/--port: cannot listen on {host}:{port}: {e.strerror or e}") from None
