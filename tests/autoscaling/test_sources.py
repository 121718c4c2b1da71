"""Metric sources: every failure is 'unavailable', never zero. Fake Prometheus on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from gem_operator.api.autoscaling import DEFAULT_SM_QUERY, AutoscalingSpec, PrometheusSource
from gem_operator.autoscaling.policy import MetricReading
from gem_operator.autoscaling.sources import (
    DEFAULT_SM_TIMESTAMP_QUERY,
    MetricSource,
    PrometheusSmActiveSource,
    SimulatedSource,
    render_query,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def vector(*items: tuple[str, float, float]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"namespace": "ns", "pod": pod}, "value": [ts, str(v)]} for pod, v, ts in items],
        },
    }


@pytest.fixture
async def fake_prom() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_get("/api/v1/query", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for r in runners:
        await r.cleanup()


def test_render_query_substitutes_and_escapes() -> None:
    q = render_query(DEFAULT_SM_QUERY, "team-a", ["ranker-1", "ranker-0"])
    assert 'namespace="team-a"' in q
    assert 'pod=~"ranker\\\\-0|ranker\\\\-1"' in q
    assert "$" not in q
    assert render_query('x{pod=~"$pods"}', "ns", []) == 'x{pod=~"^$"}'
    assert '\\"' in render_query('x{namespace="$namespace"}', 'we"ird', ["p"])


async def test_reads_values_with_scrape_timestamps(fake_prom: Callable[[Handler], Awaitable[str]]) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        q = request.query["query"]
        seen.append(q)
        if q.startswith("max by (namespace, pod) (timestamp("):
            return web.json_response(vector(("p0", 990.0, 1000.0), ("p1", 995.0, 1000.0)))
        return web.json_response(vector(("p0", 0.7, 1000.0), ("p1", 0.2, 1000.0), ("other", 0.9, 1000.0)))

    src = PrometheusSmActiveSource(await fake_prom(handler))
    assert isinstance(src, MetricSource)
    reading = await src.read("ns", ["p0", "p1"])
    assert reading.error is None
    assert reading.samples["p0"].value == pytest.approx(0.7)
    assert reading.samples["p0"].timestamp == 990.0  # the scrape time, not the evaluation time
    assert reading.samples["p1"].timestamp == 995.0
    assert "other" not in reading.samples
    assert len(seen) == 2 and any("timestamp(" in q for q in seen)
    assert DEFAULT_SM_TIMESTAMP_QUERY.startswith("max by")


async def test_custom_query_uses_evaluation_time(fake_prom: Callable[[Handler], Awaitable[str]]) -> None:
    async def handler(request: web.Request) -> web.Response:
        assert request.query["query"] == 'my_sm{ns="ns"}'
        return web.json_response(vector(("p0", 0.4, 1234.5)))

    spec = PrometheusSource(url=await fake_prom(handler), query='my_sm{ns="$namespace"}')
    reading = await PrometheusSmActiveSource.from_spec(spec).read("ns", ["p0"])
    assert reading.samples["p0"].timestamp == 1234.5


async def _fails_with(fake_prom: Callable[[Handler], Awaitable[str]], handler: Handler, **kw: Any) -> MetricReading:
    src = PrometheusSmActiveSource(await fake_prom(handler), **kw)
    reading = await src.read("ns", ["p0"])
    assert reading.error is not None
    assert reading.samples == {}
    return reading


async def test_http_error_is_unavailable(fake_prom: Callable[[Handler], Awaitable[str]]) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=503, text="overloaded")

    r = await _fails_with(fake_prom, handler)
    assert "HTTP 503" in (r.error or "")


async def test_error_status_is_unavailable(fake_prom: Callable[[Handler], Awaitable[str]]) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"status": "error", "errorType": "bad_data", "error": "parse error"})

    r = await _fails_with(fake_prom, handler)
    assert "parse error" in (r.error or "")


async def test_non_json_and_wrong_result_type_are_unavailable(
    fake_prom: Callable[[Handler], Awaitable[str]],
) -> None:
    async def not_json(request: web.Request) -> web.Response:
        return web.Response(text="<html>proxy login</html>")

    async def matrix(request: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": []}})

    assert "not JSON" in ((await _fails_with(fake_prom, not_json)).error or "")
    assert "matrix" in ((await _fails_with(fake_prom, matrix)).error or "")


@pytest.mark.parametrize(
    "body",
    [
        {"status": "success", "data": {"resultType": "vector", "result": 5}},  # list(5): a TypeError
        {"status": "success", "data": {"resultType": "vector", "result": {"pod": "p0"}}},
        # a JSON integer past a float: float() raised OverflowError, which nothing caught
        {
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": {"pod": "p0"}, "value": [1, 10**400]}]},
        },
    ],
)
async def test_a_malformed_vector_is_unavailable_not_a_failed_pass(
    fake_prom: Callable[[Handler], Awaitable[str]], body: dict[str, Any]
) -> None:
    """What a proxy or a mock in front of Prometheus may answer: an unavailable reading, never an exception."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(body), content_type="application/json")

    await _fails_with(fake_prom, handler)


def test_precompute_scalars_that_are_not_samples_raise_prometheus_error() -> None:
    from gem_operator.autoscaling.sources import PrometheusError, _scalar

    for data in ([1, 2], {"result": 5}, {"result": [{"value": [1, 10**400]}]}):
        with pytest.raises(PrometheusError):
            _scalar({"status": "success", "data": data}, "q")
    assert _scalar({"status": "success", "data": {"result": []}}, "q") is None


async def test_empty_vector_and_nan_are_unavailable_not_zero(
    fake_prom: Callable[[Handler], Awaitable[str]],
) -> None:
    async def empty(request: web.Request) -> web.Response:
        return web.json_response(vector())

    async def nan(request: web.Request) -> web.Response:
        return web.json_response(vector(("p0", float("nan"), 1.0)))

    assert "no samples" in ((await _fails_with(fake_prom, empty)).error or "")
    await _fails_with(fake_prom, nan)


async def test_timeout_is_unavailable(fake_prom: Callable[[Handler], Awaitable[str]]) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.json_response(vector(("p0", 0.5, 1.0)))

    r = await _fails_with(fake_prom, slow, timeout_seconds=0.3)
    assert "timed out" in (r.error or "")


async def test_connection_refused_is_unavailable() -> None:
    src = PrometheusSmActiveSource("http://127.0.0.1:9", timeout_seconds=2)
    reading = await src.read("ns", ["p0"])
    assert reading.error is not None and "unreachable" in reading.error


async def test_no_pods_is_unavailable() -> None:
    reading = await PrometheusSmActiveSource("http://127.0.0.1:9").read("ns", [])
    assert reading.error is not None


async def test_simulated_source() -> None:
    src = SimulatedSource()
    assert isinstance(src, MetricSource)
    assert (await src.read("ns", ["a"])).error is not None
    src.push("ns", "a", 0.5, 100.0)
    src.push("other", "a", 0.9, 100.0)
    reading = await src.read("ns", ["a", "b"])
    assert reading.error is None and set(reading.samples) == {"a"}
    assert reading.samples["a"].value == 0.5
    src.fail("simulated outage")
    assert (await src.read("ns", ["a"])).error == "simulated outage"
    src.fail(None)
    src.forget("ns", "a")
    assert src.read_now("ns", ["a"]).error is not None


async def test_queue_source_reads_the_queue_query(fake_prom: Callable[[Handler], Awaitable[str]]) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.query["query"])
        return web.json_response(vector(("r-0", 2.5, 100.0)))

    url = await fake_prom(handler)
    spec = AutoscalingSpec()
    src = PrometheusSmActiveSource.for_queue(PrometheusSource(url=url), spec.metrics.queue)
    reading = await src.read("ns", ["r-0"])
    assert reading.samples["r-0"].value == 2.5 and reading.samples["r-0"].timestamp == 100.0
    assert len(seen) == 1 and "gem_ranking_queue_depth" in seen[0] and 'namespace="ns"' in seen[0]


# --------------------------------------------------------------------------- latency


def scalar_vector(value: str | None, ts: float = 1000.0) -> dict[str, Any]:
    result = [] if value is None else [{"metric": {}, "value": [ts, value]}]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


async def test_latency_source_reads_p99_in_ms_with_the_scrape_time(
    fake_prom: Callable[[Handler], Awaitable[str]],
) -> None:
    from gem_operator.api.autoscaling import DEFAULT_LATENCY_QUERY
    from gem_operator.autoscaling.sources import LatencySource, PrometheusLatencySource

    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        q = request.query["query"]
        seen.append(q)
        if q.startswith("max(timestamp("):
            return web.json_response(scalar_vector("985.5"))
        return web.json_response(scalar_vector("0.0425"))

    spec = AutoscalingSpec.model_validate({"metrics": {"prometheus": {"url": await fake_prom(handler)}}})
    src = PrometheusLatencySource.from_spec(spec.metrics.prometheus, spec.metrics.latency)
    assert isinstance(src, LatencySource)
    reading = await src.read_latency("ns", ["p1", "p0"])
    assert reading.error is None
    assert reading.p99_ms == pytest.approx(42.5)
    assert reading.timestamp == 985.5
    assert seen[0] == render_query(DEFAULT_LATENCY_QUERY, "ns", ["p0", "p1"])
    assert "gem_ranking_request_seconds_bucket" in seen[0] and "histogram_quantile(0.99" in seen[0]


@pytest.mark.parametrize(
    ("value", "stamp", "status", "why"),
    [
        ("NaN", "1000", 200, "no p99 value (NaN: no requests in the window)"),  # histogram_quantile, no requests
        (None, "1000", 200, "query returned no series for 1 pods"),
        ("0.03", None, 200, "no fresh series"),  # the histogram stopped being scraped
        ("0.03", "1000", 503, "HTTP 503"),
    ],
)
async def test_latency_source_unavailable_never_low(
    fake_prom: Callable[[Handler], Awaitable[str]], value: str | None, stamp: str | None, status: int, why: str
) -> None:
    from gem_operator.autoscaling.sources import PrometheusLatencySource

    async def handler(request: web.Request) -> web.Response:
        if status != 200:
            return web.Response(status=status, text="unavailable")
        if request.query["query"].startswith("max(timestamp("):
            return web.json_response(scalar_vector(stamp))
        return web.json_response(scalar_vector(value))

    reading = await PrometheusLatencySource(await fake_prom(handler)).read_latency("ns", ["p0"])
    assert reading.p99_ms is None and why in (reading.error or "")


async def test_latency_source_unreachable_and_simulated() -> None:
    from gem_operator.autoscaling.sources import PrometheusLatencySource

    gone = await PrometheusLatencySource("http://127.0.0.1:9", timeout_seconds=1).read_latency("ns", ["p0"])
    assert gone.error is not None and "unreachable" in gone.error
    assert (await PrometheusLatencySource("http://127.0.0.1:9").read_latency("ns", [])).error is not None
    sim = SimulatedSource()
    assert (await sim.read_latency("ns", ["p0"])).error is not None
    sim.push_latency("ns", 31.0, 500.0)
    got = await sim.read_latency("ns", ["p0"])
    assert (got.p99_ms, got.timestamp) == (31.0, 500.0)
    sim.fail("boom")
    assert (await sim.read_latency("ns", ["p0"])).error == "boom"


async def test_an_empty_custom_latency_query_is_not_diagnosed(fake_prom: Callable[[Handler], Awaitable[str]]) -> None:
    """The diagnosis's metric and label names are the default query's: a user's own query, empty,
    costs no extra queries and is reported as it is."""
    from gem_operator.autoscaling.sources import PrometheusLatencySource

    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.query["query"])
        return web.json_response(scalar_vector(None))

    query = 'histogram_quantile(0.99, sum by (le) (rate(my_rpc_seconds_bucket{ns="$namespace"}[2m])))'
    reading = await PrometheusLatencySource(await fake_prom(handler), query).read_latency("ns", ["p0"])
    rendered = render_query(query, "ns", ["p0"])
    assert reading.error == f"query returned no series for 1 pods in namespace 'ns': {rendered}"
    assert seen == [rendered]


async def test_an_unknown_backlog_says_why(fake_prom: Callable[[Handler], Awaitable[str]], tmp_path: Any) -> None:
    """The precompute pool blocks scale-down while its backlog is unknown: the reason says why, the
    scrape's usual causes included (the workers serve it on their `metrics` port)."""
    from gem_operator.autoscaling.access import PrometheusCredentials
    from gem_operator.autoscaling.sources import PrometheusPrecomputeSignals

    async def empty(request: web.Request) -> web.Response:
        return web.json_response(scalar_vector(None))

    url = await fake_prom(empty)
    signals = await PrometheusPrecomputeSignals(url).read_precompute("ns", ["w0"], [], None)
    assert signals.backlog is None
    assert signals.backlog_error.startswith("no gem_precompute_backlog series for 1 pods in namespace 'ns'; ")
    assert "are the precompute workers scraped? They serve /metrics on their `metrics` port" in signals.backlog_error

    async def down(request: web.Request) -> web.Response:
        return web.Response(status=503, text="overloaded")

    signals = await PrometheusPrecomputeSignals(await fake_prom(down)).read_precompute("ns", ["w0"], [], None)
    assert signals.backlog is None and "answered HTTP 503: overloaded" in signals.backlog_error

    token = tmp_path / "token"
    access = PrometheusCredentials(bearer_token_file=str(token)).access({})
    signals = await PrometheusPrecomputeSignals(url, access=access).read_precompute("ns", ["w0"], [], None)
    assert signals.backlog_error.startswith("GEM_PROMETHEUS_BEARER_TOKEN_FILE: cannot read")

    async def known(request: web.Request) -> web.Response:
        return web.json_response(scalar_vector("12"))

    signals = await PrometheusPrecomputeSignals(await fake_prom(known)).read_precompute("ns", ["w0"], [], None)
    assert (signals.backlog, signals.backlog_error) == (12, "")
