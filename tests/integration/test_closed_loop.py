"""A short closed loop, for real: ranking servers as processes, Debian's Prometheus, the operator, the replayer.

Load rises from 2 to 13 requests/s over a minute. One emulated replica of the load-test service
serves ~5 requests/s, so the load starts at 40 % of one replica, under the 0.6 target, and needs
five at the top: the operator, reading DCGM_FI_PROF_SM_ACTIVE from Prometheus, scales the
Deployment up and the client's requests reach the new replicas through the Service front. Then
Prometheus is stopped and the load falls to 1 request/s: with scale-down stabilisation at 0 s the
autoscaler would shrink the pool at once if it trusted missing data; it must hold and report
MetricsUnavailable.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_testbed.drivers.closed_loop import ClosedLoop, Segment
from gem_testbed.servers.origin import NGINX, NginxOrigin, parse_rate

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "bench" / "loadtest-rankingservice.yaml"

pytest.importorskip("torch")
pytestmark = [
    pytest.mark.servers,
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("prometheus") is None and not Path("/usr/bin/prometheus").exists(),
        reason="prometheus not installed",
    ),
]


def _segment() -> Segment:
    rng = random.Random(7)
    times: list[float] = []
    t = 0.0
    while t < 130:
        rate = 2 + 11 * min(1.0, t / 60) if t < 80 else 1.0
        t += rng.expovariate(rate)
        times.append(t)
    return Segment(times[:-1], [1.0] * (len(times) - 1), 130)


def _origin(tmp: Path) -> Path:
    from gem_testbed.drivers.loadtest import prepare_origin

    return prepare_origin(tmp / "origin")


@pytest.fixture
def origin_url(tmp_path: Path) -> Iterator[str]:
    """The model origin behind nginx, as `gemop loadtest` serves it: init containers pull over HTTP."""
    if not Path(NGINX).exists():
        pytest.skip("nginx-light is not installed")
    with NginxOrigin(_origin(tmp_path), rate=parse_rate("20m"), work_dir=tmp_path / "nginx") as origin:
        yield origin.url


def test_operator_scales_up_under_load_and_holds_when_prometheus_goes_away(tmp_path: Path, origin_url: str) -> None:
    doc: dict[str, Any] = yaml.safe_load(SERVICE.read_text())
    doc["spec"]["autoscaling"]["stabilizationSeconds"] = {"up": 0, "down": 0}
    doc["spec"]["autoscaling"]["maxReplicas"] = 6
    stopped: dict[str, int] = {}

    def during(loop: ClosedLoop, now: float) -> None:
        if now >= 80 and "replicas" not in stopped:
            assert loop.prometheus is not None
            loop.prometheus.stop()
            stopped["replicas"] = loop.deployment_replicas() or 0

    with ClosedLoop(doc, tmp_path / "loop", origin_url, scrape_interval=2.0, resync_seconds=5.0,
                    sample_window=4.0, max_processes=8) as loop:  # fmt: skip
        loop.apply(1, autoscaling=True)
        loop.wait_ready(1, timeout=90)
        run = loop.replay(_segment(), pool="policy", candidates=16, during=during)
        assert loop.cluster is not None and loop.cluster.network is not None
        front = next(iter(loop.cluster.network.fronts.values()))
        served_by = {port: n for port, n in front.forwarded.items() if n > 0}
        status = loop.resource().get("status") or {}

    peak_desired = max(s.desired for s in run.samples)
    assert peak_desired >= 3, f"no scale-up under rising load: {[s.desired for s in run.samples][::10]}"
    assert max(s.ready for s in run.samples) >= 3
    assert len(served_by) >= 3, f"the client's requests reached only {len(served_by)} replicas: {served_by}"
    ok = [r for r in run.records if r["status"] == "200"]
    assert len(ok) >= 0.95 * len(run.records)

    # After Prometheus stopped (t = 80 s): no scale-down, and the reason is reported.
    assert stopped["replicas"] >= 3
    after = [s.desired for s in run.samples if s.t > 80]
    assert after and min(after) >= stopped["replicas"], (stopped, after)
    held = {c["type"]: c for c in status.get("conditions") or []}.get("MetricsUnavailable") or {}
    assert held.get("status") == "True", status.get("conditions")
    assert "unreachable" in held.get("message", "") or "Cannot connect" in held.get("message", ""), held

    # The decision log says why, sync by sync: the scale-up on SM active, then the hold without it.
    decisions = [json.loads(line) for line in (tmp_path / "loop" / "decisions-policy.jsonl").read_text().splitlines()]
    up = next(d for d in decisions if d["replicas"] >= 3)
    assert "SM active" in up["message"] and up["target"] is not None, up
    held_lines = [d for d in decisions if d["t"] > 80 and d["message"].startswith("holding at")]
    assert any("unreachable" in d["message"] for d in held_lines), decisions[-3:]
