"""Where SM utilisation comes from: Prometheus's HTTP API, or values pushed by the embedded cluster.

A source answers "per-pod SM active, with the time each was measured" or says why it cannot.
Every failure (timeout, connection refused, HTTP error, `status != "success"`, a malformed
body, an empty vector) becomes `MetricReading.unavailable(...)`, never a zero: a zero would
tell the policy the pods are idle and scale them down.

Sample times: an instant query returns the *evaluation* time, not when the sample was
scraped, and Prometheus keeps returning a series for up to 5 minutes after its last scrape.
So for the default query the source also asks for `timestamp(...)` of the raw series and uses
the scrape time; the policy then sees staleness on its own `staleAfterSeconds` clock. A custom
query can be paired with its own `timestamp_query`; without one, the evaluation time is used.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import aiohttp

from gem_operator.api.autoscaling import (
    DEFAULT_LATENCY_QUERY,
    DEFAULT_SM_QUERY,
    LatencySignal,
    PrometheusSource,
    QueueSignal,
)
from gem_operator.autoscaling.access import NO_ACCESS_SETTINGS, PrometheusAccess
from gem_operator.autoscaling.diagnosis import Count, why_no_server_series, why_no_sm_samples
from gem_operator.autoscaling.observation import LatencyReading, MetricReading, PodSample, PrecomputeSignals

# Scrape time of every raw SM-active series behind DEFAULT_SM_QUERY.
DEFAULT_SM_TIMESTAMP_QUERY = (
    'max by (namespace, pod) (timestamp(DCGM_FI_PROF_SM_ACTIVE{namespace="$namespace", pod=~"$pods"}))'
)


@runtime_checkable
class MetricSource(Protocol):
    """Per-pod SM active (0-1) for some pods of one namespace."""

    async def read(self, namespace: str, pods: Sequence[str]) -> MetricReading: ...


def render_query(template: str, namespace: str, pods: Sequence[str]) -> str:
    """Substitute `$namespace` and `$pods` (an anchored regex alternation of the escaped pod names)."""
    pods_re = "|".join(_promql_regex_escape(p) for p in sorted(pods)) or "^$"
    return template.replace("$namespace", _promql_string_escape(namespace)).replace("$pods", pods_re)


def _promql_regex_escape(name: str) -> str:
    # Pod names are DNS labels, but escape anyway; backslashes double inside a PromQL string.
    return _promql_string_escape(re.escape(name))


def _promql_string_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


CREDENTIALS_DOC = "docs/dcgm-exporter.md, section 5"


class PrometheusError(Exception):
    """Prometheus could not answer a query (the message says why)."""


class PrometheusSmActiveSource:
    """Reads SM active per pod from Prometheus `/api/v1/query`.

    `session` may be shared with other sources; if none is given, one is created per read.
    """

    def __init__(
        self,
        url: str,
        query: str = DEFAULT_SM_QUERY,
        *,
        timestamp_query: str | None = None,
        timeout_seconds: float = 5.0,
        session: aiohttp.ClientSession | None = None,
        access: PrometheusAccess = NO_ACCESS_SETTINGS,
    ) -> None:
        self.url = url.rstrip("/")
        self.access = access
        self.query = query
        if timestamp_query is None and query == DEFAULT_SM_QUERY:
            timestamp_query = DEFAULT_SM_TIMESTAMP_QUERY
        self.timestamp_query = timestamp_query
        self.timeout_seconds = timeout_seconds
        self._session = session

    @classmethod
    def for_queue(
        cls,
        spec: PrometheusSource,
        queue: QueueSignal,
        *,
        timeout_seconds: float = 5.0,
        access: PrometheusAccess = NO_ACCESS_SETTINGS,
    ) -> PrometheusSmActiveSource:
        """The same reader for `metrics.queue.query` (queued seconds of work per pod).

        Same contract: any failure is `MetricReading.unavailable`, which the policy treats as an
        empty queue (the queue can only raise a recommendation). Samples carry the evaluation time.
        """
        return cls(spec.url, queue.query, timeout_seconds=timeout_seconds, access=access)

    @classmethod
    def from_spec(
        cls,
        spec: PrometheusSource,
        *,
        timeout_seconds: float = 5.0,
        session: aiohttp.ClientSession | None = None,
        access: PrometheusAccess = NO_ACCESS_SETTINGS,
    ) -> PrometheusSmActiveSource:
        return cls(spec.url, spec.query, timeout_seconds=timeout_seconds, session=session, access=access)

    async def read(self, namespace: str, pods: Sequence[str]) -> MetricReading:
        if not pods:
            return MetricReading.unavailable("no pods to read metrics for")
        if self.access.error is not None:
            return MetricReading.unavailable(self.access.error)
        try:
            if self._session is not None:
                return await self._read(self._session, namespace, pods)
            timeout = aiohttp.ClientTimeout(total=self.timeout_seconds)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                return await self._read(session, namespace, pods)
        except PrometheusError as exc:
            return MetricReading.unavailable(str(exc))

    async def _read(self, session: aiohttp.ClientSession, namespace: str, pods: Sequence[str]) -> MetricReading:
        values_q = render_query(self.query, namespace, pods)
        if self.timestamp_query is not None:
            ts_q = render_query(self.timestamp_query, namespace, pods)
            values, stamps = await asyncio.gather(self._query(session, values_q), self._query(session, ts_q))
        else:
            values, stamps = await self._query(session, values_q), {}
        wanted = set(pods)
        samples: dict[str, PodSample] = {}
        for pod, (value, eval_time) in values.items():
            if pod not in wanted or not math.isfinite(value):
                continue
            stamp = stamps.get(pod)
            # timestamp() yields the scrape time as the *value*; fall back to the evaluation time.
            when = stamp[0] if stamp is not None and math.isfinite(stamp[0]) else eval_time
            samples[pod] = PodSample(value=value, timestamp=when)
        if not samples:
            why = await self._why_no_samples(session, namespace, pods) if self.query == DEFAULT_SM_QUERY else ""
            return MetricReading.unavailable(
                f"query returned no samples for {len(wanted)} pods in namespace {namespace!r}: {values_q}"
                + (f"; {why}" if why else "")
            )
        return MetricReading(samples=samples)

    async def _why_no_samples(self, session: aiohttp.ClientSession, namespace: str, pods: Sequence[str]) -> str:
        """For the default query, which usual cause emptied the reading (`diagnosis.py`)."""
        try:
            count = _counter(session, self.url, namespace, pods, self.timeout_seconds, self.access)
            return await why_no_sm_samples(count)
        except PrometheusError:
            return ""

    async def _query(self, session: aiohttp.ClientSession, query: str) -> dict[str, tuple[float, float]]:
        """pod -> (value, evaluation time). Raises PrometheusError on any failure."""
        endpoint = f"{self.url}/api/v1/query"
        body = await instant_query(session, endpoint, query, self.timeout_seconds, self.access)
        return parse_vector(body, endpoint)


async def instant_query(
    session: aiohttp.ClientSession,
    endpoint: str,
    query: str,
    timeout_seconds: float,
    access: PrometheusAccess = NO_ACCESS_SETTINGS,
) -> Any:
    """GET `endpoint` (`/api/v1/query`) for `query` with `access`'s headers and TLS context; the
    decoded JSON body. Raises PrometheusError on a timeout, an unreachable server, a non-200 answer
    or a body that is not JSON."""
    try:
        async with session.get(
            endpoint,
            params={"query": query},
            headers=dict(access.headers),
            ssl=access.ssl_context if access.ssl_context is not None else True,
            timeout=aiohttp.ClientTimeout(total=timeout_seconds),
        ) as resp:
            text = await resp.text()
            if resp.status in (401, 403):
                raise PrometheusError(
                    f"{endpoint} answered HTTP {resp.status}: it (or a proxy before it) wants credentials the "
                    f"operator did not send or that it refused: {text[:200]}; see {CREDENTIALS_DOC}"
                )
            if resp.status != 200:
                raise PrometheusError(f"{endpoint} answered HTTP {resp.status}: {text[:200]}")
            try:
                return await resp.json(content_type=None)
            except ValueError as exc:
                raise PrometheusError(f"{endpoint} returned a body that is not JSON: {text[:200]}") from exc
    except TimeoutError as exc:
        raise PrometheusError(f"{endpoint} timed out after {timeout_seconds:g}s") from exc
    except aiohttp.ClientConnectorCertificateError as exc:
        raise PrometheusError(
            f"{endpoint}: its TLS certificate is not trusted ({exc.certificate_error}): give the operator the CA "
            f"that signed it (GEM_PROMETHEUS_CA_FILE; {CREDENTIALS_DOC})"
        ) from exc
    except aiohttp.ClientError as exc:
        raise PrometheusError(f"{endpoint} unreachable: {exc}") from exc


def _counter(
    session: aiohttp.ClientSession,
    url: str,
    namespace: str,
    pods: Sequence[str],
    timeout_seconds: float,
    access: PrometheusAccess,
) -> Count:
    """A diagnosis's `count`: one instant query, `$namespace`/`$pods` rendered; 0 for an empty vector."""
    endpoint = f"{url}/api/v1/query"

    async def count(query: str) -> float:
        rendered = render_query(query, namespace, pods)
        return _scalar(await instant_query(session, endpoint, rendered, timeout_seconds, access), endpoint) or 0.0

    return count


def vector_result(body: Any, where: str = "prometheus") -> list[Any]:
    """The `result` list of an `/api/v1/query` instant-vector response.

    Raises PrometheusError for a non-success status or a result that is not an instant vector.
    """
    if not isinstance(body, Mapping):
        raise PrometheusError(f"{where}: response is not a JSON object")
    if body.get("status") != "success":
        raise PrometheusError(f"{where}: status {body.get('status')!r}: {body.get('errorType')}: {body.get('error')}")
    data = body.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "vector":
        kind = data.get("resultType") if isinstance(data, Mapping) else None
        raise PrometheusError(f"{where}: expected an instant vector, got resultType {kind!r}")
    result = data.get("result") or []
    if not isinstance(result, list):  # a proxy's or a mock's idea of a vector: unavailable, not a crash
        raise PrometheusError(f"{where}: result is a {type(result).__name__}, not a list of samples")
    return result


def parse_vector(body: Any, where: str = "prometheus") -> dict[str, tuple[float, float]]:
    """Turn an `/api/v1/query` response into pod -> (value, evaluation time).

    Raises PrometheusError for a non-success status or a result that is not an instant vector.
    """
    out: dict[str, tuple[float, float]] = {}
    for item in vector_result(body, where):
        try:
            pod = item["metric"]["pod"]
            stamp, raw = item["value"]
            out[str(pod)] = (float(raw), float(stamp))
        except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer past a float
            continue  # a series without a pod label, or a malformed sample: not usable per pod
    return out


# --------------------------------------------------------------------------- latency

# Scrape time of the histogram's raw series behind DEFAULT_LATENCY_QUERY: rate() over [1m] keeps
# answering for a minute after the last scrape, so freshness is judged on the scrape time.
LATENCY_METRIC = "gem_ranking_request_seconds_bucket"  # the raw series DEFAULT_LATENCY_QUERY reads
DEFAULT_LATENCY_TIMESTAMP_QUERY = (
    'max(timestamp(gem_ranking_request_seconds_count{namespace="$namespace", pod=~"$pods"}))'
)


@runtime_checkable
class LatencySource(Protocol):
    """The p99 latency of a pool (one value for some pods of one namespace)."""

    async def read_latency(self, namespace: str, pods: Sequence[str]) -> LatencyReading: ...


class PrometheusLatencySource:
    """Reads the pool's p99 (`metrics.latency.query`, in seconds) from Prometheus `/api/v1/query`.

    Same contract as the SM source: a failed query, an empty vector or a NaN (histogram_quantile
    over a window without requests) is `LatencyReading.unavailable`, never a low latency. For the
    default query the sample time is the histogram's last scrape (`timestamp(...)`), so the
    policy's `staleAfterSeconds` sees a server that stopped reporting.
    """

    def __init__(
        self,
        url: str,
        query: str = DEFAULT_LATENCY_QUERY,
        *,
        timestamp_query: str | None = None,
        timeout_seconds: float = 5.0,
        access: PrometheusAccess = NO_ACCESS_SETTINGS,
    ) -> None:
        self.url = url.rstrip("/")
        self.access = access
        self.query = query
        if timestamp_query is None and query == DEFAULT_LATENCY_QUERY:
            timestamp_query = DEFAULT_LATENCY_TIMESTAMP_QUERY
        self.timestamp_query = timestamp_query
        self.timeout_seconds = timeout_seconds

    @classmethod
    def from_spec(
        cls,
        spec: PrometheusSource,
        latency: LatencySignal,
        *,
        timeout_seconds: float = 5.0,
        access: PrometheusAccess = NO_ACCESS_SETTINGS,
    ) -> PrometheusLatencySource:
        return cls(spec.url, latency.query, timeout_seconds=timeout_seconds, access=access)

    async def read_latency(self, namespace: str, pods: Sequence[str]) -> LatencyReading:
        if not pods:
            return LatencyReading.unavailable("no pods to read latency for")
        if self.access.error is not None:
            return LatencyReading.unavailable(self.access.error)
        timeout = aiohttp.ClientTimeout(total=self.timeout_seconds)
        why = ""
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                value_q = render_query(self.query, namespace, pods)
                value = await self._one(session, value_q)
                stamp = None
                if self.timestamp_query is not None:
                    stamp = await self._one(session, render_query(self.timestamp_query, namespace, pods))
                if value is None and self.query == DEFAULT_LATENCY_QUERY:
                    why = await self._why_empty(session, namespace, pods)
        except PrometheusError as exc:
            return LatencyReading.unavailable(str(exc))
        if value is None:
            # No series matched: unlike a NaN, requests are not the question but the scrape.
            return LatencyReading.unavailable(
                f"query returned no series for {len(pods)} pods in namespace {namespace!r}: {value_q}"
                + (f"; {why}" if why else "")
            )
        if not math.isfinite(value[0]):
            return LatencyReading.unavailable(f"no p99 value (NaN: no requests in the window): {value_q}")
        if self.timestamp_query is not None and (stamp is None or not math.isfinite(stamp[0])):
            return LatencyReading.unavailable(f"the latency histogram has no fresh series: {value_q}")
        when = stamp[0] if stamp is not None else value[1]
        return LatencyReading(p99_ms=max(0.0, value[0]) * 1000.0, timestamp=when)

    async def _why_empty(self, session: aiohttp.ClientSession, namespace: str, pods: Sequence[str]) -> str:
        """For the default query, which usual cause left it without series (`diagnosis.py`)."""
        try:
            count = _counter(session, self.url, namespace, pods, self.timeout_seconds, self.access)
            return await why_no_server_series(count, LATENCY_METRIC)
        except PrometheusError:
            return ""

    async def _one(self, session: aiohttp.ClientSession, query: str) -> tuple[float, float] | None:
        """The first sample of an instant vector as (value, evaluation time); None when empty."""
        endpoint = f"{self.url}/api/v1/query"
        body = await instant_query(session, endpoint, query, self.timeout_seconds, self.access)
        result = vector_result(body, endpoint)
        if not result:
            return None
        try:
            stamp, raw = result[0]["value"]
            return float(raw), float(stamp)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PrometheusError(f"{endpoint}: malformed sample {result[0]!r}") from exc


class SimulatedSource:
    """Values pushed in by the embedded cluster's simulator (or a test); same contract as Prometheus."""

    def __init__(self) -> None:
        self._samples: dict[tuple[str, str], PodSample] = {}
        self._error: str | None = None
        self._precompute: dict[str, PrecomputeSignals] = {}
        self._latency: dict[str, LatencyReading] = {}

    def push_latency(self, namespace: str, p99_ms: float, timestamp: float) -> None:
        """The p99 (ms) of a namespace's ranking pool, as the latency query would return it."""
        self._latency[namespace] = LatencyReading(p99_ms=p99_ms, timestamp=timestamp)

    async def read_latency(self, namespace: str, pods: Sequence[str]) -> LatencyReading:
        if self._error is not None:
            return LatencyReading.unavailable(self._error)
        return self._latency.get(namespace) or LatencyReading.unavailable(f"no simulated latency in {namespace!r}")

    def push_precompute(self, namespace: str, signals: PrecomputeSignals) -> None:
        """Backlog, oldest age and ranker pressure seen by a namespace's precompute pool."""
        self._precompute[namespace] = signals

    async def read_precompute(
        self, namespace: str, pods: Sequence[str], ranker_pods: Sequence[str], ranker_slo_ms: float | None
    ) -> PrecomputeSignals:
        return self._precompute.get(namespace, PrecomputeSignals())

    def push(self, namespace: str, pod: str, value: float, timestamp: float) -> None:
        self._samples[(namespace, pod)] = PodSample(value=value, timestamp=timestamp)

    def forget(self, namespace: str, pod: str) -> None:
        self._samples.pop((namespace, pod), None)

    def fail(self, error: str | None) -> None:
        """Make reads fail with `error` (None restores normal reads)."""
        self._error = error

    async def read(self, namespace: str, pods: Sequence[str]) -> MetricReading:
        return self.read_now(namespace, pods)

    def read_now(self, namespace: str, pods: Sequence[str]) -> MetricReading:
        """Synchronous variant for simulated-time loops."""
        if self._error is not None:
            return MetricReading.unavailable(self._error)
        samples = {p: self._samples[(namespace, p)] for p in pods if (namespace, p) in self._samples}
        if not samples:
            return MetricReading.unavailable(f"no simulated samples for {len(pods)} pods in {namespace!r}")
        return MetricReading(samples=samples)


# --------------------------------------------------------------------------- precompute signals

# Metric names the workloads export (docs/contracts.md).
BACKLOG_METRIC = "gem_precompute_backlog"
BACKLOG_QUERY = 'sum(gem_precompute_backlog{namespace="$namespace", pod=~"$pods"})'
OLDEST_AGE_QUERY = 'max(gem_precompute_oldest_item_age_seconds{namespace="$namespace", pod=~"$pods"})'
RANKER_P99_QUERY = DEFAULT_LATENCY_QUERY


@runtime_checkable
class PrecomputeSignalSource(Protocol):
    """Backlog, oldest-item age and the linked ranker's p99 for a SolarisPrecompute pool."""

    async def read_precompute(
        self, namespace: str, pods: Sequence[str], ranker_pods: Sequence[str], ranker_slo_ms: float | None
    ) -> PrecomputeSignals: ...


def _scalar(body: Any, where: str) -> float | None:
    """The single value of an aggregated instant vector; None when empty or not finite."""
    if not isinstance(body, Mapping) or body.get("status") != "success":
        raise PrometheusError(f"{where}: status {body.get('status') if isinstance(body, Mapping) else body!r}")
    data = body.get("data") or {}
    result = data.get("result") or [] if isinstance(data, Mapping) else None
    if not isinstance(result, list):
        raise PrometheusError(f"{where}: no list of samples in {str(data)[:200]}")
    if not result:
        return None
    try:
        value = float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError, OverflowError) as exc:
        raise PrometheusError(f"{where}: malformed sample {result[0]!r}") from exc
    return value if math.isfinite(value) else None


class PrometheusPrecomputeSignals:
    """Reads the precompute pool's queue and the ranker's latency from Prometheus.

    A signal that cannot be read is None (unknown), never zero: the policy then neither scales
    down on backlog nor yields GPUs on a latency it did not see.
    """

    def __init__(
        self, url: str, *, timeout_seconds: float = 5.0, access: PrometheusAccess = NO_ACCESS_SETTINGS
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self.access = access

    async def _value(self, session: aiohttp.ClientSession, query: str) -> float | None:
        return (await self._read(session, query))[0]

    async def _read(self, session: aiohttp.ClientSession, query: str) -> tuple[float | None, str]:
        """The query's single value, or None and why ("" for an empty answer)."""
        if self.access.error is not None:
            return None, self.access.error
        endpoint = f"{self.url}/api/v1/query"
        try:
            body = await instant_query(session, endpoint, query, self.timeout_seconds, self.access)
            return _scalar(body, endpoint), ""
        except PrometheusError as exc:
            return None, str(exc)

    async def read_precompute(
        self, namespace: str, pods: Sequence[str], ranker_pods: Sequence[str], ranker_slo_ms: float | None
    ) -> PrecomputeSignals:
        timeout = aiohttp.ClientTimeout(total=self.timeout_seconds)
        backlog, why = None, "no pods"
        async with aiohttp.ClientSession(timeout=timeout) as session:
            if pods:
                backlog, why = await self._read(session, render_query(BACKLOG_QUERY, namespace, pods))
                if backlog is None and not why:
                    why = f"no {BACKLOG_METRIC} series for {len(pods)} pods in namespace {namespace!r}"
                    try:  # the scrape, most likely: say which convention broke (diagnosis.py)
                        count = _counter(session, self.url, namespace, pods, self.timeout_seconds, self.access)
                        cause = await why_no_server_series(count, BACKLOG_METRIC, "precompute workers", "metrics")
                    except PrometheusError:
                        cause = ""
                    why += f"; {cause}" if cause else ""
            age = await self._value(session, render_query(OLDEST_AGE_QUERY, namespace, pods)) if pods else None
            p99 = None
            if ranker_pods and ranker_slo_ms is not None:
                p99 = await self._value(session, render_query(RANKER_P99_QUERY, namespace, ranker_pods))
        over = p99 is not None and ranker_slo_ms is not None and p99 * 1000.0 > ranker_slo_ms
        return PrecomputeSignals(
            backlog=None if backlog is None else int(backlog),
            oldest_item_age_seconds=age,
            ranker_over_slo=over,
            ranker_message=f"ranker p99 {p99 * 1000.0:.0f} ms > SLO {ranker_slo_ms:g} ms" if over and p99 else "",
            backlog_error="" if backlog is not None else why,
        )


__all__ = [
    "DEFAULT_LATENCY_TIMESTAMP_QUERY",
    "DEFAULT_SM_TIMESTAMP_QUERY",
    "LatencySource",
    "MetricSource",
    "PrecomputeSignalSource",
    "PrometheusError",
    "PrometheusLatencySource",
    "PrometheusPrecomputeSignals",
    "PrometheusSmActiveSource",
    "SimulatedSource",
    "parse_vector",
    "render_query",
]
