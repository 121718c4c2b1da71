"""Bearer-token authentication for the embedded cluster (a test double of the API server's).

With a token configured, every request must carry ``Authorization: Bearer <token>``; anything
else gets the API server's answer, a 401 ``Status`` (reason Unauthorized). This is what lets a test
prove that a kubeconfig's credentials (an exec plugin's token, say) really reach the server.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable

import aiohttp.web

Handler = Callable[[aiohttp.web.BaseRequest], Awaitable[aiohttp.web.StreamResponse]]

UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


def require_bearer(token: str, handler: Handler) -> Handler:
    """Wrap a request handler so that only requests bearing ``token`` reach it."""
    expected = f"Bearer {token}".encode()

    async def checked(request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return aiohttp.web.Response(
                status=401, body=json.dumps(UNAUTHORIZED).encode(), headers={"Content-Type": "application/json"}
            )
        return await handler(request)

    return checked
