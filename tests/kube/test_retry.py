"""The kube seam's retries: which errors are retried, how long it waits, what a final failure says."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest
from lightkube.core.exceptions import ApiError

from gem_operator.kube.retry import KubeCallError, RetryPolicy, retry_after, with_retries


def api_error(code: int, headers: dict[str, str] | None = None, details: dict[str, Any] | None = None) -> ApiError:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                            "reason": "Injected", "message": f"injected {code}"}  # fmt: skip
    if details:
        body["details"] = details
    request = httpx2.Request("GET", "http://api/x")
    response = httpx2.Response(code, headers=headers or {}, content=json.dumps(body).encode(), request=request)
    return ApiError(request=request, response=response)


class Script:
    """A call that fails with the given errors, then returns "ok"; sleeps are recorded, not slept."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.slept: list[float] = []

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def run(script: Script, policy: RetryPolicy | None = None, **kw: Any) -> str:
    fn: Callable[[], Awaitable[str]] = script
    return asyncio.run(
        with_retries(
            "create Pod default/p", fn, sleep=script.sleep, rng=lambda: 0.5, policy=policy or RetryPolicy(), **kw
        )
    )


def test_5xx_and_transport_errors_are_retried_with_growing_backoff() -> None:
    script = Script(api_error(500), api_error(503), httpx2.ReadTimeout("slow"), httpx2.ConnectError("reset"))
    assert run(script) == "ok"
    assert script.calls == 5
    # 0.2 s doubling, each half fixed and half jitter (rng 0.5 -> 75 %)
    assert script.slept == pytest.approx([0.15, 0.3, 0.6, 1.2])


def test_backoff_is_capped_and_jittered() -> None:
    policy = RetryPolicy(base_seconds=1, cap_seconds=4)
    assert policy.backoff(10, rng=lambda: 0.0) == 2.0
    assert policy.backoff(10, rng=lambda: 1.0) == 4.0
    assert policy.backoff(1, rng=lambda: 0.0) == 0.5


def test_429_waits_at_least_retry_after() -> None:
    script = Script(api_error(429, headers={"Retry-After": "3"}))
    assert run(script) == "ok"
    assert script.slept == [3.0]


def test_retry_after_from_status_details_and_http_date() -> None:
    assert retry_after(api_error(429, details={"retryAfterSeconds": 2})) == 2.0
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    err = api_error(503, headers={"Retry-After": "Thu, 01 Jan 2026 00:00:05 GMT"})
    assert retry_after(err, now=now) == 5.0
    assert retry_after(api_error(500)) is None


def test_retry_after_beyond_the_cap_fails_the_call_for_the_pass_to_requeue() -> None:
    script = Script(api_error(429, headers={"Retry-After": "120"}))
    with pytest.raises(KubeCallError) as info:
        run(script)
    assert info.value.code == 429 and script.slept == [] and script.calls == 1


def test_client_errors_are_not_retried_and_name_the_call() -> None:
    script = Script(api_error(422))
    with pytest.raises(KubeCallError) as info:
        run(script)
    assert script.calls == 1
    assert str(info.value).startswith("create Pod default/p failed after 1 attempt: HTTP 422")


def test_passthrough_codes_reach_the_caller_unretried() -> None:
    script = Script(api_error(409))
    with pytest.raises(ApiError):
        run(script, passthrough={409})
    assert script.calls == 1


def test_attempts_run_out() -> None:
    script = Script(*(api_error(500) for _ in range(10)))
    with pytest.raises(KubeCallError) as info:
        run(script, RetryPolicy(attempts=3))
    assert script.calls == 3 and info.value.attempts == 3 and info.value.code == 500


def test_time_budget_runs_out() -> None:
    script = Script(*(api_error(503, headers={"Retry-After": "5"}) for _ in range(10)))
    with pytest.raises(KubeCallError):
        run(script, RetryPolicy(budget_seconds=12, retry_after_cap_seconds=10), clock=lambda: sum(script.slept))
    assert script.slept == [5.0, 5.0]


def test_an_error_page_that_is_not_a_status_is_retried_by_its_code() -> None:
    request = httpx2.Request("GET", "http://lb/x")
    page = httpx2.HTTPStatusError("bad gateway", request=request, response=httpx2.Response(502, request=request))
    script = Script(page)
    assert run(script) == "ok" and script.calls == 2
    script = Script(httpx2.HTTPStatusError("nope", request=request, response=httpx2.Response(403, request=request)))
    with pytest.raises(KubeCallError, match="HTTP 403 Forbidden from lb"):
        run(script)
