"""Real Prometheus (Debian's /usr/bin/prometheus) scraping a real prometheus-client exporter.

The exporter publishes DCGM_FI_PROF_SM_ACTIVE{namespace,pod} like dcgm-exporter, and the ranking
server's queue gauge and request counter. Prometheus scrapes it every second; the sources read it
through /api/v1/query; the policy decides. Then the exporter stops (series go stale), and
Prometheus stops: both are 'unavailable', and the policy holds instead of scaling down. Loopback
only; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.policy import (
    METRICS_UNAVAILABLE,
    MetricReading,
    Observation,
    PodSample,
    PodState,
    ScalerState,
    desired_replicas,
)
from gem_operator.autoscaling.sources import PrometheusSmActiveSource

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PODS = ["ads-ranker-0", "ads-ranker-1", "ads-ranker-2", "ads-ranker-3"]
NS = "team-ads"

pytestmark = [
    pytest.mark.servers,
    pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="prometheus binary not installed"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Exporter:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.gauge = Gauge(
            "DCGM_FI_PROF_SM_ACTIVE",
            "Ratio of cycles an SM has at least 1 warp assigned.",
            ["namespace", "pod", "gpu"],
            registry=self.registry,
        )
        # The ranking server's own series (gem_workloads.serving.metrics), as its pods export them.
        self.queue_depth = Gauge(
            "gem_ranking_queue_depth",
            "Requests waiting in the batcher's queue.",
            ["namespace", "pod"],
            registry=self.registry,
        )
        self.requests = Counter(
            "gem_ranking_requests",
            "Ranking requests by HTTP status code.",
            ["namespace", "pod", "code"],
            registry=self.registry,
        )
        self._completing = threading.Event()
        self.port = free_port()
        server, self.thread = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)
        self.server: Any = server

    def set(self, value: float) -> None:
        for i, pod in enumerate(PODS):
            self.gauge.labels(namespace=NS, pod=pod, gpu=str(i)).set(value)
        # A pod of another namespace must not leak into the reading.
        self.gauge.labels(namespace="other", pod=PODS[0], gpu="9").set(0.01)

    def serve(self, pods: list[str], per_second: float, queued: float) -> None:
        """Complete `per_second` requests/s on each pod (a background thread) with `queued` waiting."""
        for pod in pods:
            self.queue_depth.labels(namespace=NS, pod=pod).set(queued)

        def tick() -> None:
            while not self._completing.wait(0.1):
                for pod in pods:
                    self.requests.labels(namespace=NS, pod=pod, code="200").inc(per_second / 10)

        threading.Thread(target=tick, daemon=True).start()

    def stop(self) -> None:
        self._completing.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    exp = Exporter()
    yield exp
    exp.stop()


@pytest.fixture
def prometheus(tmp_path: Path, exporter: Exporter) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with scraping(tmp_path, "prometheus", [(exporter.port, None)]) as running:
        yield running


async def wait_for(read: PrometheusSmActiveSource, check: object, within: float = 20.0) -> MetricReading:
    deadline = time.monotonic() + within
    last: MetricReading | None = None
    while time.monotonic() < deadline:
        last = await read.read(NS, PODS)
        if check(last):  # type: ignore[operator]
            return last
        await asyncio.sleep(0.3)
    pytest.fail(f"condition not met within {within}s; last reading: {last}")


def observe(reading: MetricReading, n: int = 4) -> Observation:
    return Observation(current_replicas=n, pods=[PodState(p, ready=True) for p in PODS[:n]], metrics=reading)


async def test_prometheus_source_and_policy_end_to_end(
    exporter: Exporter, prometheus: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, proc = prometheus
    spec = AutoscalingSpec.model_validate(
        {
            "minReplicas": 1,
            "maxReplicas": 20,
            "targetSmActive": 0.6,
            "stabilizationSeconds": {"down": 0},
            "metrics": {"prometheus": {"url": url}, "staleAfterSeconds": 10},
        }
    )
    async with aiohttp.ClientSession() as session:
        source = PrometheusSmActiveSource.from_spec(spec.metrics.prometheus, timeout_seconds=2, session=session)

        # Busy pods: scale up.
        exporter.set(0.8)
        reading = await wait_for(source, lambda r: len(r.samples) == 4 and r.samples[PODS[0]].value > 0.75)
        now = time.time()
        assert all(abs(now - s.timestamp) < 10 for s in reading.samples.values())
        state = ScalerState()
        d = desired_replicas(spec, state, observe(reading), now)
        assert d.desired_replicas == 6  # ceil(4 * 0.8 / 0.6)
        assert d.condition(METRICS_UNAVAILABLE).status == "False"
        state = d.state

        # Idle pods: scale down (down window 0 s in this spec).
        exporter.set(0.15)
        reading = await wait_for(source, lambda r: len(r.samples) == 4 and r.samples[PODS[0]].value < 0.2)
        d = desired_replicas(spec, state, observe(reading), time.time())
        assert d.desired_replicas == 1
        state = d.state

        # Prometheus stops mid-run: unavailable, MetricsUnavailable, hold (no scale-down).
        proc.terminate()
        proc.wait(timeout=10)
        reading = await source.read(NS, PODS)
        assert reading.error is not None and reading.samples == {}
        d = desired_replicas(spec, state, observe(reading), time.time())
        assert d.desired_replicas == 4
        assert d.condition(METRICS_UNAVAILABLE).status == "True"
        assert d.condition(METRICS_UNAVAILABLE).reason == "SourceError"


async def test_a_query_in_percent_holds_and_names_the_field(
    exporter: Exporter, prometheus: tuple[str, subprocess.Popen[bytes]]
) -> None:
    """The usual slip: SM active written as a percentage. Read as a fraction, 45 % orders maxReplicas."""
    url, _ = prometheus
    query = '100 * avg by (namespace, pod) (DCGM_FI_PROF_SM_ACTIVE{namespace="$namespace", pod=~"$pods"})'
    spec = AutoscalingSpec.model_validate(
        {"targetSmActive": 0.6, "maxReplicas": 40, "metrics": {"prometheus": {"url": url, "query": query}}}
    )
    source = PrometheusSmActiveSource.from_spec(spec.metrics.prometheus, timeout_seconds=2)
    exporter.set(0.45)
    reading = await wait_for(source, lambda r: len(r.samples) == 4)
    assert all(abs(s.value - 45.0) < 1e-6 for s in reading.samples.values())
    d = desired_replicas(spec, ScalerState(), observe(reading), time.time())
    assert d.desired_replicas == 4
    problem = d.condition(METRICS_UNAVAILABLE)
    assert (problem.status, problem.reason) == ("True", "MetricsOutOfRange")
    assert "reads 45" in problem.message and "spec.autoscaling.metrics.prometheus.query" in problem.message


async def test_stopped_exporter_goes_stale_not_zero(
    exporter: Exporter, prometheus: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, _ = prometheus
    spec = AutoscalingSpec.model_validate(
        {"targetSmActive": 0.6, "stabilizationSeconds": {"down": 0}, "metrics": {"prometheus": {"url": url}}}
    )
    source = PrometheusSmActiveSource(url, timeout_seconds=2)
    exporter.set(0.05)
    await wait_for(source, lambda r: len(r.samples) == 4)
    exporter.stop()
    # A failed scrape marks the series stale: the vector empties, the reading is unavailable.
    reading = await wait_for(source, lambda r: r.error is not None, within=15)
    assert "no samples" in (reading.error or "")
    d = desired_replicas(spec, ScalerState(), observe(reading), time.time())
    assert d.desired_replicas == 4
    assert d.condition(METRICS_UNAVAILABLE).status == "True"


async def test_queue_signal_through_real_prometheus(
    exporter: Exporter, prometheus: tuple[str, subprocess.Popen[bytes]]
) -> None:
    """The default queue PromQL (queue gauge / completion rate) on real Prometheus raises the count."""
    url, _ = prometheus
    spec = AutoscalingSpec.model_validate(
        {"targetSmActive": 0.6, "maxReplicas": 20, "metrics": {"prometheus": {"url": url}, "staleAfterSeconds": 10}}
    )
    # Pods 0-2 complete 200 requests/s with 12,000 waiting: 60 s of queued work each. Pod 3 exports
    # no queue series at all (an older server build): it must count as an empty queue, not fail.
    exporter.set(0.6)
    exporter.serve(PODS[:3], per_second=200.0, queued=12000.0)
    sm = PrometheusSmActiveSource(url, timeout_seconds=2)
    queue = PrometheusSmActiveSource.for_queue(spec.metrics.prometheus, spec.metrics.queue, timeout_seconds=2)

    rate = PrometheusSmActiveSource(
        url,
        'sum by (namespace, pod) (rate(gem_ranking_requests_total{namespace="$namespace", pod=~"$pods"}[1m]))',
        timeout_seconds=2,
    )
    # rate() over [1m] ramps up while the series is younger than a minute, so compare the queue
    # reading with the rate Prometheus reports at the same moment rather than with 200/s.
    q = await wait_for(queue, lambda r: len(r.samples) == 3 and all(s.value > 1.0 for s in r.samples.values()))
    r = await rate.read(NS, PODS)
    for pod, sample in q.samples.items():
        assert sample.value == pytest.approx(12000.0 / r.samples[pod].value, rel=0.15)
    assert PODS[3] not in q.samples
    now = time.time()
    assert all(abs(now - s.timestamp) < 10 for s in q.samples.values())
    sm_reading = await wait_for(sm, lambda r: len(r.samples) == 4)

    # On target by SM active alone: inside the band, no change.
    plain = desired_replicas(spec, ScalerState(), observe(sm_reading), now)
    assert plain.desired_replicas == 4
    # The queued work raises it: emptying it within drainSeconds adds 0.6 * q / drainSeconds for each
    # of pods 0-2, served flat out (SM active 0.9) on top of the arrivals.
    obs = Observation(current_replicas=4, pods=[PodState(p, ready=True) for p in PODS], metrics=sm_reading, queue=q)
    d = desired_replicas(spec, ScalerState(), obs, now)
    drain = spec.metrics.queue.drain_seconds
    arrivals = sum(s.value for s in sm_reading.samples.values())
    draining = sum(
        s.value * (q.samples[p].value if p in q.samples else 0.0) / drain for p, s in sm_reading.samples.items()
    )
    assert d.recommendation == max(math.ceil(arrivals / 0.6 - 1e-9), math.ceil((arrivals + draining) / 0.9 - 1e-9)) > 4
    assert d.desired_replicas == min(d.recommendation, 8)  # default rate policy: +100 % or +4 per 15 s
    assert d.reason == "QueuedWork"

    # The queue source failing (Prometheus gone) is an empty queue: back to the SM signal, no error.
    broken = PrometheusSmActiveSource.for_queue(
        spec.metrics.prometheus.model_copy(update={"url": f"http://127.0.0.1:{free_port()}"}),
        spec.metrics.queue,
        timeout_seconds=1,
    )
    gone = await broken.read(NS, PODS)
    assert gone.error is not None
    obs = Observation(current_replicas=4, pods=obs.pods, metrics=sm_reading, queue=gone)
    held = desired_replicas(spec, ScalerState(), obs, now)
    assert held.desired_replicas == 4
    assert held.condition(METRICS_UNAVAILABLE).status == "False"


async def test_latency_histogram_through_the_default_query(tmp_path: Path) -> None:
    """The ranking server's own histogram (ServerMetrics), scraped by real Prometheus, read by the default
    `metrics.latency.query`: p99 as histogram_quantile interpolates it; over the SLO it cuts the SM target and
    blocks scale-down; a server that stops being scraped makes the latency unavailable, not low."""
    from gem_operator.api.serving import RankingServiceSpec
    from gem_operator.autoscaling.policy import SCALING_LIMITED, LatencyReading
    from gem_operator.autoscaling.sources import PrometheusLatencySource
    from gem_workloads.serving.metrics import ServerMetrics

    servers = [ServerMetrics() for _ in PODS[:2]]
    exporters = []
    for m in servers:
        p = free_port()
        httpd, _thread = start_http_server(p, addr="127.0.0.1", registry=m.registry)
        exporters.append((p, httpd))
    stop = threading.Event()

    def traffic() -> None:
        # Per pod every 0.1 s: 19 requests at 15 ms and 1 at 80 ms, so 5 % of requests fall in the
        # (75 ms, 100 ms] bucket and the 0.99 quantile lies 80 % into it: 75 + 0.8 * 25 = 95 ms.
        while not stop.wait(0.1):
            for m in servers:
                for _ in range(19):
                    m.request_seconds.observe(0.015)
                m.request_seconds.observe(0.080)

    threading.Thread(target=traffic, daemon=True).start()
    targets = [(p, {"namespace": NS, "pod": pod}) for (p, _), pod in zip(exporters, PODS[:2], strict=True)]
    with scraping(tmp_path, "prometheus-latency", targets, job="ranker") as (url, _):
        try:
            spec = RankingServiceSpec.model_validate(
                {
                    "model": {"uri": "s3://m/x"},
                    "slo": {"p99LatencyMs": 40},
                    "autoscaling": {
                        "targetSmActive": 0.6,
                        "stabilizationSeconds": {"down": 0},
                        "metrics": {"prometheus": {"url": url}, "staleAfterSeconds": 10},
                    },
                }
            )
            a = spec.autoscaling
            source = PrometheusLatencySource.from_spec(a.metrics.prometheus, a.metrics.latency, timeout_seconds=2)
            deadline = time.monotonic() + 30
            reading = LatencyReading.unavailable("not read yet")
            while time.monotonic() < deadline:
                reading = await source.read_latency(NS, PODS[:2])
                if reading.p99_ms is not None:
                    break
                await asyncio.sleep(0.5)
            assert reading.p99_ms == pytest.approx(95.0, abs=1.0), reading
            assert reading.timestamp is not None and abs(time.time() - reading.timestamp) < 5

            # Idle-looking pods (SM 0.1) would scale down; the p99 over the SLO cuts the target and holds them.
            # The SLO loop moves on a p99 that has been above its band for a whole window of a quiet pool:
            # the state says so; the cut is the loop's largest (error clamped at log 1.5, P + I gains 0.3).
            pods = [PodState(p, ready=True) for p in PODS[:2]]
            sm = MetricReading(samples={p: PodSample(0.1, time.time()) for p in PODS[:2]})
            now = time.time()
            obs = Observation(current_replicas=2, pods=pods, metrics=sm, latency=reading)
            before = ScalerState(slo_quiet_since=now - 120, slo_outside=(now - 120, math.log(2.0)))
            d = desired_replicas(a, before, obs, now, slo_p99_ms=spec.slo.p99_latency_ms)
            cut = 0.6 * math.exp(-0.6 * math.log(1.5))
            assert d.effective_target == pytest.approx(cut) and d.p99_ms == pytest.approx(reading.p99_ms)
            assert d.desired_replicas == 2 and d.condition(SCALING_LIMITED).reason == "LatencyOverSlo"

            # The servers stop being scraped: the histogram's series go stale; latency unavailable, not low.
            stop.set()
            for _, httpd in exporters:
                httpd.shutdown()
                httpd.server_close()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                reading = await source.read_latency(NS, PODS[:2])
                if reading.error is not None:
                    break
                await asyncio.sleep(0.5)
            assert reading.p99_ms is None and "no fresh series" in (reading.error or "")
            held = desired_replicas(a, d.state, Observation(2, pods, sm, latency=reading), time.time(), slo_p99_ms=40)
            assert held.effective_target == pytest.approx(cut)  # learned value kept, not reset by missing data
        finally:
            stop.set()


@contextlib.contextmanager
def scraping(
    tmp_path: Path, name: str, targets: list[tuple[int, dict[str, str] | None]], *, job: str = "dcgm"
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Prometheus (its URL and process) scraping each loopback (port, target labels) every
    second, the target labelled as given (as Kubernetes service discovery labels a pod),
    honor_labels off (the default). A test may stop the process itself."""
    configs = "".join(
        f"      - targets: ['127.0.0.1:{port}']\n"
        + (f"        labels: {{{', '.join(f'{k}: {v}' for k, v in labels.items())}}}\n" if labels else "")
        for port, labels in targets
    )
    cfg = tmp_path / f"{name}.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        "    scrape_interval: 1s\n"
        "    scrape_timeout: 1s\n"
        "    static_configs:\n" + configs
    )
    web = free_port()
    with (tmp_path / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / name}",
                f"--web.listen-address=127.0.0.1:{web}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield f"http://127.0.0.1:{web}", proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


@contextlib.contextmanager
def serving(registry: CollectorRegistry) -> Iterator[int]:
    """An exporter of `registry` on a free loopback port (the port), shut down after."""
    port = free_port()
    server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()


async def _scraped(url: str, query: str, within: float = 20.0) -> None:
    """Wait until `query` (a count) answers > 0: the first scrapes are in."""
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"{url}/api/v1/query", params={"query": query}) as resp:
                    result = (await resp.json())["data"]["result"]
            except aiohttp.ClientError:  # not listening yet
                result = []
            if result and float(result[0]["value"][1]) > 0:
                return
            await asyncio.sleep(0.3)
    pytest.fail(f"{query} stayed empty for {within}s")


async def test_an_empty_reading_says_which_real_cluster_convention_broke(exporter: Exporter, tmp_path: Path) -> None:
    """The three usual causes of "no samples" on a real cluster, each reproduced with real
    Prometheus, each named with its fix in the MetricsUnavailable message: the scrape renamed the
    exporter's pod labels (its target is labelled pod/namespace, honor_labels off), the exporter
    attributes GPUs to no pod, and no SM series at all. The reading stays unavailable (a hold)."""
    exporter.set(0.7)
    dcgm_pod = {"namespace": "gpu-monitoring", "pod": "dcgm-exporter-x7k2p"}
    with scraping(tmp_path, "renamed", [(exporter.port, dcgm_pod)]) as (url, _):
        await _scraped(url, "count(DCGM_FI_PROF_SM_ACTIVE)")
        reading = await PrometheusSmActiveSource(url, timeout_seconds=2).read(NS, PODS)
    assert reading.samples == {} and reading.error is not None
    assert "its series carry exported_namespace and exported_pod" in reading.error
    assert reading.error.endswith(
        "set honor_labels: true on the dcgm-exporter scrape job (honorLabels: true on a ServiceMonitor)"
    )

    registry = CollectorRegistry()
    gauge = Gauge("DCGM_FI_PROF_SM_ACTIVE", "SM active, per GPU only.", ["gpu", "Hostname"], registry=registry)
    for gpu in range(3):
        gauge.labels(gpu=str(gpu), Hostname="node-1").set(0.7)
    with serving(registry) as port, scraping(tmp_path, "unattributed", [(port, None)]) as (url, _):
        await _scraped(url, "count(DCGM_FI_PROF_SM_ACTIVE)")
        reading = await PrometheusSmActiveSource(url, timeout_seconds=2).read(NS, PODS)
    assert reading.error is not None and "none of its 3 DCGM_FI_PROF_SM_ACTIVE series has a pod label" in reading.error

    with serving(CollectorRegistry()) as port, scraping(tmp_path, "nothing", [(port, None)]) as (url, _):
        await _scraped(url, "count(up == 1)")
        reading = await PrometheusSmActiveSource(url, timeout_seconds=2).read(NS, PODS)
    assert reading.error is not None and "Prometheus holds no DCGM_FI_PROF_SM_ACTIVE series at all" in reading.error


async def test_an_empty_latency_reading_says_how_the_servers_are_scraped(tmp_path: Path) -> None:
    """The ranking servers' own histogram takes its pod labels from the scrape, so the usual causes
    differ from dcgm-exporter's: a job naming them kubernetes_namespace/kubernetes_pod_name (the
    older example configuration), a job labelling no pod at all. Each reproduced with real
    Prometheus and named in the reading's error, which the SLO loop reports as it holds."""
    from gem_operator.autoscaling.sources import PrometheusLatencySource
    from gem_workloads.serving.metrics import ServerMetrics

    server = ServerMetrics()
    server.request_seconds.observe(0.015)
    metric = "gem_ranking_request_seconds_bucket"
    with serving(server.registry) as port:
        older = {"kubernetes_namespace": NS, "kubernetes_pod_name": PODS[0]}
        with scraping(tmp_path, "older-names", [(port, older)], job="kubernetes-pods") as (url, _):
            await _scraped(url, f"count({metric})")
            reading = await PrometheusLatencySource(url, timeout_seconds=2).read_latency(NS, PODS[:1])
        assert reading.p99_ms is None and reading.error is not None
        assert reading.error.startswith(f"query returned no series for 1 pods in namespace {NS!r}")
        assert f"its {metric} series carry kubernetes_namespace and kubernetes_pod_name" in reading.error

        with scraping(tmp_path, "no-pod", [(port, None)], job="ranker") as (url, _):
            await _scraped(url, f"count({metric})")
            reading = await PrometheusLatencySource(url, timeout_seconds=2).read_latency(NS, PODS[:1])
        assert reading.error is not None and "series has a pod label: the scrape must label each" in reading.error

    with serving(CollectorRegistry()) as port, scraping(tmp_path, "no-ranker", [(port, None)]) as (url, _):
        await _scraped(url, "count(up == 1)")
        reading = await PrometheusLatencySource(url, timeout_seconds=2).read_latency(NS, PODS[:1])
    assert reading.error is not None and f"Prometheus holds no {metric} series at all" in reading.error


async def test_a_prometheus_behind_an_https_gateway_with_a_token_and_a_tenant(
    exporter: Exporter, prometheus: tuple[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Real Prometheus behind nginx as production runs it (thanos-querier's token proxy, a Mimir
    gateway): https signed by a private CA, 401 without the bearer token, 403 without the tenant. The
    operator's credentials (a token file, re-read each sync, and the CA) with the resource's tenant
    header read SM active through it; each missing piece is a hold that names what to set."""
    from gem_operator.autoscaling.access import PrometheusCredentials
    from gem_testbed.servers.gateway import PrometheusGateway, make_ca_and_certificate

    exporter.set(0.7)
    url, _ = prometheus
    await _scraped(url, "count(DCGM_FI_PROF_SM_ACTIVE)")
    ca, cert, key = make_ca_and_certificate(tmp_path / "pki")
    token = tmp_path / "token"
    token.write_text("sa-token-1\n")
    tenant = {"X-Scope-OrgID": "team-ads"}
    with PrometheusGateway(
        url, authorization="Bearer sa-token-1", tenant="team-ads", certificate=cert, key=key
    ) as gateway:

        async def read(creds: PrometheusCredentials, headers: dict[str, str]) -> MetricReading:
            source = PrometheusSmActiveSource(gateway.url, timeout_seconds=2, access=creds.access(headers))
            return await source.read(NS, PODS)

        creds = PrometheusCredentials(bearer_token_file=str(token), ca_file=str(ca))
        reading = await read(creds, tenant)
        assert reading.error is None and {s.value for s in reading.samples.values()} == {0.7}

        untrusted = await read(PrometheusCredentials(bearer_token_file=str(token)), tenant)
        assert untrusted.error is not None and "its TLS certificate is not trusted" in untrusted.error
        assert "GEM_PROMETHEUS_CA_FILE" in untrusted.error

        no_tenant = await read(creds, {})
        assert no_tenant.error is not None and "answered HTTP 403" in no_tenant.error

        token.write_text("sa-token-2")  # rotated; the gateway still wants the first
        refused = await read(creds, tenant)
        assert refused.error is not None and "answered HTTP 401: it (or a proxy before it) wants credentials" in (
            refused.error
        )

        token.unlink()
        asked = gateway.requests()
        gone = await read(creds, tenant)
        assert gone.samples == {} and gone.error is not None
        assert gone.error.startswith(f"GEM_PROMETHEUS_BEARER_TOKEN_FILE: cannot read {token}")
        assert gateway.requests() == asked > 0  # nothing asked without the credentials

    # A Mimir-style gateway: basic auth, no tenant check here.
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    expected = "Basic " + base64.b64encode(b"team-ads:s3cret").decode()
    with PrometheusGateway(url, authorization=expected, tenant=None, certificate=cert, key=key) as gateway:
        creds = PrometheusCredentials(username="team-ads", password_file=str(password), ca_file=str(ca))
        source = PrometheusSmActiveSource(gateway.url, timeout_seconds=2, access=creds.access({}))
        reading = await source.read(NS, PODS)
        assert reading.error is None and len(reading.samples) == len(PODS)
