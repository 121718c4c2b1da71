"""One closed loop on one machine: the embedded cluster running a RankingService's pods as processes,
Debian's Prometheus, the real operator (``gemop run``) and the real replayer, for `gemop loadtest`
and its tests (see drivers/loadtest.py for the figures and the command).

`ClosedLoop` starts the cluster (process kubelet, Service front, node dcgm-exporters, file_sd),
Prometheus on those targets and the operator subprocess; `apply` creates the RankingService
pointed at that Prometheus; `replay` sends a `Segment` through the Service front with
``python -m gem_workloads.replay`` and samples the replicas held every second. `close` (or leaving
the `with` block, also on an exception or Ctrl-C) stops every process it started.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gem_operator.api.crd import gem_crds
from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.policy import MetricReading, Observation, PodSample, ScalerState, desired_replicas
from gem_operator.autoscaling.policy import pod_states as policy_pod_states
from gem_operator.autoscaling.steps.hysteresis import as_hpa
from gem_operator.render.common import LABEL_INSTANCE, LABEL_KIND, LABEL_ROLE
from gem_operator.render.serving import ROLE_SERVER
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.kubelets.lifecycle import LifecycleConfig
from gem_testbed.kubelets.processes import ProcessConfig, free_port
from gem_testbed.servers.prometheus import PrometheusServer

GEM = "gem.dev/v1alpha1"


class LoadtestError(RuntimeError):
    """The load test cannot run or went wrong; the message says what and how to fix it."""


@dataclass(frozen=True)
class Segment:
    """The requests of one trace segment, already scaled: send times (s from the start) and costs."""

    times: list[float]
    costs: list[float]
    seconds: int
    time_note: str = ""  # how the trace's numeric time stamps were read, when not as seconds

    def write_jsonl(self, path: Path) -> Path:
        with path.open("w") as f:
            for t, c in zip(self.times, self.costs, strict=True):
                f.write(json.dumps({"t": round(t, 4), "cost": round(c, 4)}) + "\n")
        return path

    def peak_rps(self, window: int = 60) -> float:
        """Highest mean request rate over `window` s (what a static pool is sized for)."""
        counts = [0] * max(1, self.seconds)
        for t in self.times:
            counts[min(int(t), len(counts) - 1)] += 1
        w = max(1, min(window, len(counts)))
        best = running = sum(counts[:w])
        for i in range(w, len(counts)):
            running += counts[i] - counts[i - w]
            best = max(best, running)
        return best / w


# --------------------------------------------------------------------------- one closed loop


@dataclass
class Sample:
    t: float
    replicas: int  # pods held (created, not deleted), starting ones included
    ready: int
    desired: int


@dataclass
class PoolRun:
    """What one pool did: the client's records and the replicas held, second by second."""

    name: str
    records: list[dict[str, Any]]
    samples: list[Sample]
    startup_seconds: list[float]
    conditions: list[dict[str, Any]] = field(default_factory=list)


class DecisionLog:
    """Each autoscaler decision the pool's status shows, as it changes: one JSON line per change
    (seconds into the segment, the replicas the workload holds, the ScalingActive message with
    every step's reason, the effective SM target and the p99 the operator read). What the replay's
    decisions are compared with when the two disagree; the client's records say what happened,
    this says why."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")
        self._last: dict[str, Any] | None = None

    def note(self, now: float, replicas: int, resource: Mapping[str, Any]) -> None:
        status = resource.get("status") or {}
        conditions: list[dict[str, Any]] = status.get("conditions") or []
        active: dict[str, Any] = next((c for c in conditions if c.get("type") == "ScalingActive"), {})
        scaling = status.get("autoscaling") or {}
        seen = {
            "replicas": replicas,
            "message": active.get("message"),
            "target": scaling.get("effectiveTargetSmActive"),
            "p99_ms": scaling.get("p99LatencyMs"),
        }
        if seen["message"] is None or seen == self._last:
            return
        self._last = seen
        with self.path.open("a") as f:
            f.write(json.dumps({"t": round(now, 1), **seen}) + "\n")


# The HPA-on-RPS pool's rate window in Prometheus (6 scrapes at 5 s); the fluid side uses the same.
RPS_WINDOW_SECONDS = 30


def python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def _stop(proc: subprocess.Popen[Any] | None, grace: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


class ClosedLoop:
    """Cluster + process kubelet + Prometheus + operator for one RankingService (a context manager).

    `origin` is where init containers pull the model from: a directory, or the URL of an HTTP
    origin (`sim.origin.NginxOrigin`). `replay(segment)` runs the real replayer against the
    Service front and returns a `PoolRun`;
    `prometheus.stop()` mid-run is how a test takes the metrics away.
    """

    def __init__(
        self,
        service: Mapping[str, Any],
        work_dir: Path,
        origin: Path | str,
        *,
        fleet: str = "demo",
        max_processes: int = 20,
        scrape_interval: float = 5.0,
        resync_seconds: float = 15.0,
        sample_window: float = 5.0,
    ) -> None:
        self.doc = copy.deepcopy(dict(service))
        self.name = str(self.doc["metadata"]["name"])
        self.namespace = str(self.doc["metadata"].get("namespace") or "default")
        self.doc["metadata"]["namespace"] = self.namespace
        self.spec = RankingServiceSpec.model_validate(self.doc.get("spec") or {})
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.config = ProcessConfig(
            root=self.work_dir / "kubelet",
            max_processes=max_processes,
            origins={self.spec.model.origin: str(origin)},
            env={"OMP_NUM_THREADS": "1"},
        )
        self.fleet, self.scrape_interval, self.resync_seconds = fleet, scrape_interval, resync_seconds
        self.sample_window = sample_window
        self.cluster: EmbeddedCluster | None = None
        self.prometheus: PrometheusServer | None = None
        self.operator: subprocess.Popen[bytes] | None = None
        self._stack = contextlib.ExitStack()

    # -- start and stop -------------------------------------------------------------------------

    def __enter__(self) -> ClosedLoop:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        cluster = EmbeddedCluster(
            self.fleet, list(gem_crds().values()), lifecycle=LifecycleConfig(), run_pods=self.config
        )
        self.cluster = self._stack.enter_context(cluster)
        assert cluster.network is not None
        cluster.network.sample_window = self.sample_window
        self.prometheus = PrometheusServer(
            cluster.network.sd_dir, scrape_interval=self.scrape_interval, work_dir=self.work_dir / "prometheus"
        )
        (self.work_dir / "prometheus").mkdir(exist_ok=True)
        self.prometheus.start()
        kubeconfig = cluster.write_kubeconfig(self.work_dir / "kubeconfig")
        env = python_env({"KUBECONFIG": str(kubeconfig), "GEM_RESYNC_SECONDS": f"{self.resync_seconds:g}"})
        log = (self.work_dir / "operator.log").open("wb")
        self.operator = subprocess.Popen(
            [sys.executable, "-m", "gem_operator.cli", "run", "-n", self.namespace, "--standalone",
             "--liveness", f"http://127.0.0.1:{free_port()}/healthz", "--metrics-port", "0"],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log.close()

    def close(self) -> None:
        _stop(self.operator)
        self.operator = None
        if self.prometheus is not None:
            self.prometheus.close()
            self.prometheus = None
        self._stack.close()
        self.cluster = None

    # -- the service ----------------------------------------------------------------------------

    def apply(self, replicas: int, autoscaling: bool) -> None:
        assert self.cluster is not None and self.prometheus is not None
        doc = copy.deepcopy(self.doc)
        spec = doc.setdefault("spec", {})
        spec["replicas"] = replicas
        scaling = spec.setdefault("autoscaling", {})
        scaling["enabled"] = autoscaling
        scaling.setdefault("metrics", {}).setdefault("prometheus", {})["url"] = self.prometheus.url
        self.cluster.apply(doc)

    def set_replicas(self, n: int) -> None:
        """What an HPA does through the scale subresource."""
        assert self.cluster is not None
        meta = {"name": self.name, "namespace": self.namespace}
        self.cluster.apply({"apiVersion": GEM, "kind": "RankingService", "metadata": meta, "spec": {"replicas": n}})

    def selector(self) -> dict[str, str]:
        return {LABEL_KIND: "rankingservice", LABEL_INSTANCE: self.name, LABEL_ROLE: ROLE_SERVER}

    def pods(self) -> list[dict[str, Any]]:
        assert self.cluster is not None
        return [
            p
            for p in self.cluster.list("v1", "Pod", self.namespace, self.selector())
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def resource(self) -> dict[str, Any]:
        assert self.cluster is not None
        return self.cluster.get(GEM, "RankingService", self.name, self.namespace) or {}

    def service_url(self) -> str | None:
        assert self.cluster is not None
        return self.cluster.service_url(self.namespace, f"{self.name}-{ROLE_SERVER}")

    def wait_ready(self, n: int, timeout: float) -> None:
        assert self.cluster is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = sum(1 for s in policy_pod_states(self.pods()) if s.serving)
            network = self.cluster.network
            assert network is not None
            front = network.fronts.get((self.namespace, f"{self.name}-{ROLE_SERVER}"))
            if ready >= n and front is not None and len(front.endpoints) >= n:
                return
            if self.operator is not None and self.operator.poll() is not None:
                raise LoadtestError(
                    f"the operator exited ({self.operator.returncode}); see {self.work_dir}/operator.log"
                )
            time.sleep(0.5)
        raise LoadtestError(
            f"{n} replicas were not Ready within {timeout:g} s; pod logs under {self.config.root}, "
            f"operator log {self.work_dir}/operator.log"
        )

    # -- the run --------------------------------------------------------------------------------

    def replay(
        self,
        segment: Segment,
        *,
        pool: str,
        candidates: int,
        seq_len: int | None = None,
        timeout_s: float = 10.0,
        decide: Callable[[ClosedLoop, float], None] | None = None,
        progress: Callable[[str], None] | None = None,
        sync_seconds: float = 15.0,
        during: Callable[[ClosedLoop, float], None] | None = None,
        warmup_s: float = 0.0,
        on_warm: Callable[[ClosedLoop], None] | None = None,
    ) -> PoolRun:
        """Send the segment through the Service front; sample replicas every second meanwhile.

        `decide` (an external autoscaler) runs every `sync_seconds` once `warmup_s` have passed,
        when `on_warm` also runs once (e.g. to hand the pool to the operator's autoscaler): every
        autoscaler starts its history with the load on, as the replay's pools do."""
        url = self.service_url()
        if url is None:
            raise LoadtestError("the RankingService's Service has no front yet (no pods)")
        trace = segment.write_jsonl(self.work_dir / "segment.jsonl")
        records_path = self.work_dir / f"records-{pool}.jsonl"
        cmd = [sys.executable, "-m", "gem_workloads.replay", "--trace", str(trace), "--url", url,
               "--candidates", str(candidates), "--max-candidates", str(candidates * 8),
               "--timeout", f"{timeout_s:g}", "--max-requests", str(len(segment.times) + 1),
               "--duration", str(segment.seconds), "--records", str(records_path), "--interval", "5"]  # fmt: skip
        if seq_len is not None:
            cmd += ["--seq-len", str(seq_len)]
        out = (self.work_dir / f"replay-{pool}.log").open("wb")
        proc = subprocess.Popen(cmd, env=python_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        samples: list[Sample] = []
        startups: list[float] = []
        start = time.monotonic()
        next_sync, next_minute = max(sync_seconds, warmup_s), 60.0
        warm = False
        decisions = DecisionLog(self.work_dir / f"decisions-{pool}.jsonl")
        try:
            while proc.poll() is None:
                now = time.monotonic() - start
                pods = self.pods()
                states = policy_pod_states(pods)
                self._startups(pods, startups)
                resource = self.resource()
                desired = int(((resource.get("spec") or {}).get("replicas")) or 0)
                deploy = self.deployment_replicas()
                decisions.note(now, deploy or desired, resource)
                samples.append(Sample(now, len(pods), sum(1 for s in states if s.serving), deploy or desired))
                if not warm and now >= warmup_s:
                    warm = True
                    if on_warm is not None:
                        on_warm(self)
                if decide is not None and now >= next_sync:
                    next_sync += sync_seconds
                    decide(self, now)
                if during is not None:
                    during(self, now)
                if progress is not None and now >= next_minute:
                    progress(
                        self._progress_line(pool, int(next_minute // 60), samples, self.work_dir / f"replay-{pool}.log")
                    )
                    next_minute += 60.0
                time.sleep(max(0.0, 1.0 - (time.monotonic() - start - now)))
        finally:
            _stop(proc, grace=timeout_s + 5)
        if proc.returncode not in (0, None):
            raise LoadtestError(f"the replayer failed ({proc.returncode}); see {self.work_dir}/replay-{pool}.log")
        records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
        conditions = list((self.resource().get("status") or {}).get("conditions") or [])
        return PoolRun(pool, records, samples, startups, conditions)

    _seen_ready: set[str]

    def _startups(self, pods: list[dict[str, Any]], out: list[float]) -> None:
        """Creation -> Ready of pods that turned Ready (from their own timestamps)."""
        seen: set[str] = getattr(self, "_seen_ready", set())
        self._seen_ready = seen
        for p in pods:
            name = p["metadata"]["name"]
            ready = next((c for c in (p.get("status") or {}).get("conditions") or []
                          if c.get("type") == "Ready" and c.get("status") == "True"), None)  # fmt: skip
            if ready is None or name in seen:
                continue
            seen.add(name)
            out.append(_seconds_between(p["metadata"].get("creationTimestamp"), ready.get("lastTransitionTime")))

    def deployment_replicas(self) -> int | None:
        assert self.cluster is not None
        d = self.cluster.get("apps/v1", "Deployment", f"{self.name}-{ROLE_SERVER}", self.namespace)
        return int((d or {}).get("spec", {}).get("replicas", 0)) if d else None

    def _progress_line(self, pool: str, minute: int, samples: list[Sample], log: Path) -> str:
        """Replicas over the last minute and what the replayer reported for it (its interval lines)."""
        last = samples[-60:]
        held = sum(s.replicas for s in last) / max(1, len(last))
        ready, desired = (last[-1].ready, last[-1].desired) if last else (0, 0)
        ok = errors = 0
        p99 = 0.0
        with contextlib.suppress(OSError):
            for line in log.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    row = json.loads(line)
                    if "t" in row and (minute - 1) * 60 <= row["t"] < minute * 60:
                        ok += int(row.get("ok", 0))
                        errors += sum(int(v) for v in (row.get("errors") or {}).values())
                        p99 = max(p99, float(row.get("p99_ms") or 0.0))
        return (
            f"[{pool}] minute {minute}: {held:.1f} replicas held, {ready} Ready, desired {desired}; "
            f"{ok} ok, {errors} errors, p99 <= {p99:.0f} ms (5 s intervals)"
        )

    # -- what the HPA-RPS baseline reads --------------------------------------------------------

    def rps_per_pod(self) -> dict[str, float] | None:
        assert self.prometheus is not None
        q = f'sum by (pod) (rate(gem_ranking_requests_total{{namespace="{self.namespace}"}}[{RPS_WINDOW_SECONDS}s]))'
        try:
            params = urllib.parse.urlencode({"query": q})
            with urllib.request.urlopen(f"{self.prometheus.url}/api/v1/query?{params}", timeout=5) as r:
                body = json.loads(r.read())
        except (OSError, ValueError):
            return None
        return {x["metric"]["pod"]: float(x["value"][1]) for x in body.get("data", {}).get("result", [])}


def _seconds_between(a: str | None, b: str | None) -> float:
    from datetime import datetime

    if not a or not b:
        return 0.0
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return max(0.0, (datetime.strptime(b, fmt) - datetime.strptime(a, fmt)).total_seconds())


def hpa_rps_decider(spec: RankingServiceSpec, target_rps: float) -> Callable[[ClosedLoop, float], None]:
    """The HPA algorithm (the operator's own policy code, no saturation rule, no queue signal) on
    requests/s per Ready pod from Prometheus; writes spec.replicas as an HPA writes /scale. The
    ramp lead and the direction budget are the policy's, not HPA's: off here."""
    state = [ScalerState()]
    hpa = as_hpa(spec.autoscaling)

    def decide(loop: ClosedLoop, now: float) -> None:
        pods = loop.pods()
        states = policy_pod_states(pods)
        rates = loop.rps_per_pod()
        serving = [s.name for s in states if s.serving]
        if rates is None:
            reading = MetricReading.unavailable("prometheus did not answer")
        else:
            t = time.time()
            samples = {n: PodSample(rates[n] / target_rps * spec.autoscaling.target_sm_active, t) for n in serving
                       if n in rates}  # fmt: skip
            reading = MetricReading(samples=samples) if samples else MetricReading.unavailable("no samples")
        current = int((loop.resource().get("spec") or {}).get("replicas") or len(pods))
        obs = Observation(
            current_replicas=current, pods=states, metrics=reading, gpus_per_replica=spec.gpus_per_replica
        )
        d = desired_replicas(hpa, state[0], obs, time.time(), saturation=None)
        state[0] = d.state
        if d.desired_replicas != current:
            loop.set_replicas(d.desired_replicas)

    return decide
