"""Retries for API calls, as client-go does them: 429 honouring Retry-After, 5xx, resets, timeouts.

A call is retried with capped exponential backoff and jitter (so many operators hitting one busy
API server do not retry in step) until it succeeds, fails with an error that retrying cannot fix
(4xx other than 429), or its attempts or time budget run out. What is left is raised as
``KubeCallError`` naming the call ("create Pod default/x-worker-3"), so that a failed pass can say
which call failed. Codes a caller handles itself (404 on get/delete, 409 on create) pass through as
lightkube's ``ApiError``, unretried.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import httpx2
from lightkube.core.exceptions import ApiError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Server-side trouble worth another try: overloaded, unavailable, or a proxy that gave up.
RETRYABLE_CODES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one call tries; the defaults keep a failing call under ~15 s."""

    attempts: int = 6
    base_seconds: float = 0.2
    cap_seconds: float = 4.0
    # Retry-After beyond this is not waited for here: the pass fails and is requeued instead.
    retry_after_cap_seconds: float = 10.0
    budget_seconds: float = 20.0

    def backoff(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """Seconds before retry ``attempt`` (1-based): half fixed, half jitter, doubling to the cap."""
        full = min(self.cap_seconds, self.base_seconds * 2.0 ** (attempt - 1))
        return full / 2 + rng() * full / 2


DEFAULT_POLICY = RetryPolicy()


class KubeCallError(Exception):
    """An API call that failed for good; ``call`` names it, ``cause`` is the last error."""

    def __init__(self, call: str, cause: BaseException, attempts: int) -> None:
        self.call, self.cause, self.attempts = call, cause, attempts
        super().__init__(f"{call} failed after {attempts} attempt{'s' if attempts != 1 else ''}: {describe(cause)}")

    @property
    def code(self) -> int | None:
        return _code(self.cause)


def _code(exc: BaseException) -> int | None:
    if isinstance(exc, ApiError) and exc.status.code is not None:
        return int(exc.status.code)
    if isinstance(exc, httpx2.HTTPStatusError):
        return exc.response.status_code
    return None


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return f"HTTP {_code(exc)} {exc.status.reason or ''}: {exc.status.message or ''}".strip().rstrip(":")
    if isinstance(exc, httpx2.HTTPStatusError):
        # Not a Status object: a proxy or load balancer answered (an HTML 502, say).
        return f"HTTP {exc.response.status_code} {exc.response.reason_phrase} from {exc.request.url.host}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def retry_after(exc: BaseException, now: datetime | None = None) -> float | None:
    """The server's Retry-After (seconds or an HTTP date), or the Status details' retryAfterSeconds."""
    if not isinstance(exc, httpx2.HTTPStatusError):
        return None
    header = exc.response.headers.get("Retry-After")
    if header:
        header = header.strip()
        if header.isdigit():
            return float(header)
        try:
            when = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    details = exc.status.details if isinstance(exc, ApiError) else None
    seconds = getattr(details, "retryAfterSeconds", None) if details is not None else None
    return float(seconds) if isinstance(seconds, int) and seconds >= 0 else None


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx2.HTTPStatusError):
        return _code(exc) in RETRYABLE_CODES
    # Connection refused/reset, read/connect timeouts, a peer that closed mid-response.
    return isinstance(exc, httpx2.TransportError | TimeoutError | ConnectionError)


async def with_retries(
    call: str,
    fn: Callable[[], Awaitable[T]],
    *,
    passthrough: Collection[int] = (),
    also_retry: Collection[int] = (),
    policy: RetryPolicy = DEFAULT_POLICY,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rng: Callable[[], float] = random.random,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run ``fn`` (a fresh request each time) until it succeeds or retrying stops making sense."""
    started = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await fn()
        except httpx2.HTTPStatusError as exc:  # ApiError, or a non-Status error page
            if isinstance(exc, ApiError) and exc.status.code in passthrough:
                raise
            error: BaseException = exc
        except (httpx2.TransportError, TimeoutError, ConnectionError) as exc:
            error = exc
        if not (retryable(error) or _code(error) in also_retry) or attempt >= policy.attempts:
            raise KubeCallError(call, error, attempt) from error
        delay = policy.backoff(attempt, rng)
        hint = retry_after(error)
        if hint is not None:
            if hint > policy.retry_after_cap_seconds:
                raise KubeCallError(call, error, attempt) from error
            delay = max(delay, hint)
        if clock() - started + delay > policy.budget_seconds:
            raise KubeCallError(call, error, attempt) from error
        log.debug("%s: %s; retry %d in %.2f s", call, describe(error), attempt, delay)
        await sleep(delay)
