"""Trace replay on simulated time: parsing, the service model, reports, plots, bad inputs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gem_common.traces import TraceFields, parse_where
from gem_operator.api.autoscaling import SloFeedback
from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.decision import Decision, Limit
from gem_operator.replay import autoscalers
from gem_operator.replay.autoscalers import Window, pool_observation, unsafe_scale_down
from gem_operator.replay.command import main
from gem_operator.replay.engine import (
    HPA_RPS,
    POLICY,
    STATIC_PEAK,
    Arrivals,
    LoadSeries,
    TraceError,
    load_service,
    load_trace,
    run_replay,
    simulate,
    to_series,
)
from gem_operator.replay.report import LEARNED_BELOW, most_in_an_hour
from gem_operator.replay.service_model import (
    Pool,
    ProfileError,
    ServiceModel,
    interpolate,
    weighted_quantile,
)
from gem_testbed.plots.replay import plot_report
from gem_workloads.replay.trace import load_trace as workloads_load_trace

from .conftest import pool_result, replay_report

# The shared Azure trace, shipped in the repo with its attribution (data/traces/README.md).
SHARED = Path(__file__).resolve().parents[2] / "data" / "traces" / "azure-llm-2023-code.csv"

SERVICE_YAML = """\
apiVersion: gem.dev/v1alpha1
kind: RankingService
metadata: {name: test-ranker, namespace: default}
spec:
  gpusPerReplica: 1
  model: {uri: s3://models/ranker}
  slo: {p99LatencyMs: 40}
  autoscaling: {minReplicas: 2, maxReplicas: 40, targetSmActive: 0.6}
"""


@pytest.fixture
def service(tmp_path: Path) -> Path:
    p = tmp_path / "rks.yaml"
    p.write_text(SERVICE_YAML)
    return p


def step_trace(tmp_path: Path) -> Path:
    """Pre-aggregated JSONL: 500 req/s for 10 min, 1,500 req/s for 20 min, 500 req/s for 20 min."""
    lines = []
    for t in range(3000):
        rate = 1500 if 600 <= t < 1800 else 500
        lines.append(json.dumps({"t": t, "count": rate, "cost": rate}))
    p = tmp_path / "step.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


# --------------------------------------------------------------------------- the model


def test_service_model_curves() -> None:
    m = ServiceModel()
    assert interpolate(m.latency_p99_ms, 0.0) == 18.0
    assert interpolate(m.latency_p99_ms, 0.75) == pytest.approx(34.0)
    assert interpolate(m.latency_p99_ms, 2.0) == 250.0
    u = m.utilisation_for_sm(0.6)
    assert interpolate(m.sm_active, u) == pytest.approx(0.6, abs=1e-6)
    assert m.startup_seconds == 120.0
    assert weighted_quantile([1, 2, 100], [50, 49, 1], 0.99) == 2
    assert weighted_quantile([1, 2, 100], [50, 48, 2], 0.99) == 100


def test_pool_readiness_queue_and_gpu_time() -> None:
    m = ServiceModel()
    pool = Pool(m)
    pool.scale_to(2, 0.0)
    assert pool.ready_count(119.0) == 0 and pool.ready_count(120.0) == 2
    util, sm, p99 = pool.step(100.0, 10.0, 1.0)
    assert p99 == m.timeout_ms and sm == 0.0  # nothing serves yet
    pool.queue = 0.0
    util, sm, p99 = pool.step(200.0, 130.0, 1.0)  # 2 replicas * 200 = 400 capacity
    assert util == pytest.approx(0.5) and p99 == pytest.approx(20.0)
    util, sm, p99 = pool.step(800.0, 131.0, 1.0)  # overload: queue of 400 units = 1 s of waiting
    assert pool.queue == pytest.approx(400.0) and p99 == pytest.approx(250.0 + 1000.0)
    assert pool.gpu_seconds == pytest.approx(6.0)
    pool.scale_to(1, 140.0)
    assert len(pool.created) == 1


def test_profile_replaces_defaults(tmp_path: Path) -> None:
    p = tmp_path / "profile.json"
    p.write_text(
        json.dumps({"throughput_per_replica": 50, "model_load_seconds": 300, "latency_p99_ms": [[0, 5], [1, 100]]})
    )
    m = ServiceModel.load(p)
    assert m.throughput_per_replica == 50 and m.startup_seconds == 330
    assert m.latency_p99_ms == ((0.0, 5.0), (1.0, 100.0))
    assert m.sm_active == ServiceModel().sm_active


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "line 1 column 2"),
        ('{"throughput": 5}', "unknown keys ['throughput']"),
        ('{"throughput_per_replica": 0}', "must be positive"),
        ('{"timeout_ms": 0}', "timeout_ms must be positive, got 0 (the p99 reported while nothing serves"),
        ('{"throughput_per_replica": "fast"}', "must be a number"),
        ('{"sm_active": [[0, 1], [0, 2]]}', "x values must increase"),
        ('{"sm_active": [[0, 1], [1]]}', "sm_active[1]"),
        # Python's JSON reads NaN and Infinity: a NaN x crashed the replay (IndexError), a NaN or
        # infinite y, an SM active past 1 or falling with load sized its pools at nonsense.
        ('{"sm_active": [[0, 0.03], [NaN, 0.95]]}', "sm_active[1]: expected [x, y] finite numbers"),
        ('{"latency_p99_ms": [[0, 10], [1, Infinity]]}', "latency_p99_ms[1]: expected [x, y] finite"),
        ('{"sm_active": [[0, 0.03], [1, 40]]}', "SM active is a fraction (0-1) that does not fall"),
        ('{"sm_active": [[0, 0.95], [1, 0.03]]}', "SM active is a fraction (0-1) that does not fall"),
        ('{"latency_p99_ms": [[0, -10], [1, 5]]}', "y must not be negative; got -10"),
        ('{"sm_active": [[0, 0.03], [100, 0.95]]}', "x is a utilisation, from 0 to 1; got 0 to 100"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_bad_profiles(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(ProfileError) as exc:
        ServiceModel.load(p)
    assert str(p) in str(exc.value) and message in str(exc.value)


# --------------------------------------------------------------------------- traces


def test_csv_trace_parsing_and_cost_column(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,100\n2023-11-16 18:17:05.5,300\n\n")
    a = load_trace(p)
    assert a.times[1] - a.times[0] == pytest.approx(1.52004, abs=1e-4)
    assert a.costs == [1.0, 1.0]
    w = load_trace(p, cost_column="ContextTokens")
    assert w.costs == [0.5, 1.5]  # normalised to mean 1
    s = to_series(w, scale=10, smooth_seconds=1, mode="duplicate")
    assert s.seconds == 2 and s.cost.tolist() == [5.0, 15.0] and s.requests.tolist() == [10.0, 10.0]


def test_duplicate_smoothing_has_no_dip_at_the_edges() -> None:
    """A steady trace stays steady to its first and last second (a zero-padded mean halved them)."""
    times = [float(t) for t in range(60) for _ in range(3)]
    a = Arrivals(times, [1.0] * len(times), [1.0] * len(times), "steady")
    s = to_series(a, scale=10, mode="duplicate")
    assert s.cost.tolist() == pytest.approx([30.0] * 60) and s.requests.tolist() == pytest.approx([30.0] * 60)


def test_numeric_timestamps_and_sniffing(tmp_path: Path) -> None:
    p = tmp_path / "trace.txt"
    p.write_text("TIMESTAMP\n0\n0.5\n3\n")
    assert load_trace(p).times == [0.0, 0.5, 3.0]
    j = tmp_path / "trace.data"
    j.write_text('{"t": 1, "cost": 2.5}\n{"t": 0}\n')
    a = load_trace(j)
    assert a.costs == [2.5, 1.0] and a.counts == [1.0, 1.0]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.csv", "", "empty file"),
        ("a.csv", "time,cost\n1,2\n", "line 1: no TIMESTAMP column (columns: time, cost)"),
        ("a.csv", "TIMESTAMP\n", "no requests"),
        (
            "a.csv",
            "TIMESTAMP,x\n2023-11-16 18:17:03,1\nyesterday,2\n",
            "line 3, column TIMESTAMP: cannot parse 'yesterday'",
        ),
        ("a.csv", "TIMESTAMP,x\n1,2,3\n", "line 2: 3 fields, the header has 2"),
        ("a.jsonl", '{"t": 1}\n{"t": 2, "cost": }\n', "line 2, column 18: invalid JSON"),
        ("a.jsonl", '{"t": 1}\n{"cost": 2}\n', "line 2: missing key 't'"),
        ("a.jsonl", '{"t": -1}\n', "line 1, key 't': expected seconds >= 0 or a date-time"),
        ("a.jsonl", '{"t": 1, "cost": "big"}\n', "line 1, key 'cost'"),
        ("a.jsonl", "[1, 2]\n", "line 1: expected an object"),
        ("a.jsonl", "\n\n", "no requests"),
        ("a.csv", "TIMESTAMP\n1\nnan\n", "line 3, column TIMESTAMP: cannot parse 'nan'"),  # was a traceback
        ("a.csv", "TIMESTAMP\n1\n-inf\n", "line 3, column TIMESTAMP: cannot parse '-inf'"),
        ("a.csv", "TIMESTAMP\n1\n" + "9" * 200_000 + "\n", "line 3: not a CSV row (field larger"),
        # any extension: sniffing reads text too
        ("a.dat", "TIMESTAMP\n\udcff\udcfe\n", "line 2, field 1: not UTF-8 text (byte 0xff); is it a CSV trace"),
        ("a.csv", "TIMESTAMP\n1\n\udc80\n", "line 3, field 1: not UTF-8 text (byte 0x80); is it a CSV trace"),
        ("a.jsonl", '{"t": 1}\n{"t": "\udcff"}\n', "line 2, column 8: not UTF-8 text (byte 0xff); is it a JSONL trace"),
        ("a.jsonl", '{"t": 1, "count": 1e308}\n{"t": 1.5, "count": 1e308}\n', "add up past a float's range"),
    ],
)
def test_bad_traces_name_file_line_and_column(tmp_path: Path, name: str, content: str, message: str) -> None:
    p = tmp_path / name
    p.write_bytes(content.encode("utf-8", "surrogateescape"))  # lone surrogates: bytes that are not UTF-8
    with pytest.raises(TraceError) as exc:
        to_series(load_trace(p))  # some are found only when the arrivals are binned
    assert str(exc.value).startswith(str(p))
    assert message in str(exc.value)


def test_a_csv_trace_from_a_spreadsheet_reads_as_written(tmp_path: Path) -> None:
    """A byte-order mark before the header and a lower-case ``timestamp`` column are the same trace."""
    plain = tmp_path / "plain.csv"
    plain.write_text("TIMESTAMP\n1\n2.5\n")
    for name, text in (("bom.csv", "\ufeffTIMESTAMP\n1\n2.5\n"), ("lower.csv", "timestamp\n1\n2.5\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert load_trace(tmp_path / name).times == load_trace(plain).times == [1.0, 2.5]
    (tmp_path / "two.csv").write_text("timestamp,Timestamp\n1,2\n")
    with pytest.raises(TraceError, match="no TIMESTAMP column"):  # two candidates: which one is not a guess
        load_trace(tmp_path / "two.csv")


def test_huge_costs_are_weights_not_an_overflow(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,c\n1,1e308\n2,1e308\n3,5e307\n")
    assert load_trace(p, cost_column="c").costs == pytest.approx([1.2, 1.2, 0.6])


def test_bad_cost_column(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,tokens\n1,10\n2,lots\n")
    with pytest.raises(TraceError, match=r"line 3, column tokens: 'lots' is not a number"):
        load_trace(p, cost_column="tokens")
    with pytest.raises(TraceError, match="no column 'nope'"):
        load_trace(p, cost_column="nope")
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(p.with_name("missing.csv"))


def test_bad_service_files(tmp_path: Path) -> None:
    p = tmp_path / "svc.yaml"
    p.write_text(
        "kind: RankingService\nspec:\n  autoscaling: {minReplicas: 5, maxReplicas: 2}\n  model: {uri: s3://x/y}\n"
    )
    with pytest.raises(TraceError, match=r"svc.yaml: spec.autoscaling"):
        load_service(p)
    p.write_text("kind: SolarisPrecompute\n")
    with pytest.raises(TraceError, match="no RankingService"):
        load_service(p)
    p.write_text("kind: [\n")
    with pytest.raises(TraceError, match="line 2, column 1: invalid YAML"):
        load_service(p)


# --------------------------------------------------------------------------- replays


def test_step_load_policy_follows_and_beats_static(tmp_path: Path, service: Path) -> None:
    report = run_replay(step_trace(tmp_path), service, smooth_seconds=1)
    pol, static, rps = (report.results[k] for k in (POLICY, STATIC_PEAK, HPA_RPS))
    per_replica = 0.6 * 200  # about the load one replica carries at the 0.6 SM target
    assert static.peak_replicas == int(np.ceil(1500 / (ServiceModel().utilisation_for_sm(0.6) * 200)))
    # Scales up for the high phase, back down afterwards, within bounds.
    assert pol.replicas_per_minute[5] < pol.replicas_per_minute[25]
    assert pol.replicas_per_minute[-1] < pol.replicas_per_minute[25]
    assert min(pol.replicas_per_minute) >= 2 and pol.peak_replicas <= 40
    assert pol.peak_replicas >= 1500 / per_replica
    assert pol.gpu_hours < static.gpu_hours
    # The step is 3x: a couple of bad minutes while replicas load, then fine.
    assert 1 <= pol.slo_violation_minutes <= 6
    assert static.slo_violation_minutes == 0
    assert pol.direction_changes_per_hour <= 4
    assert rps.scaling_events >= 2
    d = report.to_dict()
    assert set(d["policy"]) >= {
        "gpu_hours",
        "slo_violation_minutes",
        "direction_changes_per_hour",
        "peak_replicas",
    }
    assert set(d["baselines"]) == {"static_peak", "hpa_rps"}
    assert d["duration_seconds"] == 3000 and len(d["timeline"]) == 50
    assert set(d["timeline"][0]["policy"]) == {"replicas", "sm_active", "p99_ms", "effective_target"}
    assert set(d["timeline"][0]["hpa_rps"]) == {"replicas", "sm_active", "p99_ms"}
    assert d["scale_mode"] == "independent" and d["warmup_minutes"] == 3
    json.dumps(d)


@pytest.mark.parametrize(
    ("times", "most"),
    [
        ([], 0),
        ([100.0], 1),
        # A 58-minute run with 4 changes holds 4 in its one hour (a mean over it would read 4.1).
        ([60.0, 900.0, 2000.0, 3400.0], 4),
        # A day: 3 changes in one hour and 1 in another read 3, not the day's mean.
        ([1000.0, 1500.0, 4000.0, 50000.0], 3),
        # The window is half-open: changes exactly an hour apart are in different hours.
        ([0.0, 3600.0, 7200.0], 1),
    ],
)
def test_direction_changes_count_the_busiest_hour(times: list[float], most: int) -> None:
    assert most_in_an_hour(times) == most


def test_scale_keeps_the_time_axis(tmp_path: Path) -> None:
    a = load_trace(step_trace(tmp_path))
    one, two = to_series(a, scale=1), to_series(a, scale=2)
    assert one.seconds == two.seconds
    assert float(two.cost.sum()) == pytest.approx(2 * float(one.cost.sum()))
    with pytest.raises(TraceError, match="--scale"):
        to_series(a, scale=0)


def test_replay_is_deterministic(service: Path, tmp_path: Path) -> None:
    t = step_trace(tmp_path)
    a, b = run_replay(t, service), run_replay(t, service)
    assert a.to_dict() == b.to_dict()


def test_shared_trace_slice(tmp_path: Path, service: Path) -> None:
    lines = SHARED.read_text().splitlines()[:2500]  # about the first 20 minutes
    p = tmp_path / "slice.csv"
    p.write_text("\n".join(lines) + "\n")
    report = run_replay(p, service, scale=40, cost_column="ContextTokens")
    pol, static = report.results[POLICY], report.results[STATIC_PEAK]
    assert report.minutes >= 15
    assert static.slo_violation_minutes == 0
    assert pol.gpu_hours < static.gpu_hours
    assert pol.scaling_events >= 1
    table = report.to_table()
    assert "policy" in table and "static_peak" in table and "hpa_rps" in table


def test_cluster_gpus_cap_the_policy(tmp_path: Path, service: Path) -> None:
    report = run_replay(step_trace(tmp_path), service, cluster_gpus=6)
    assert report.results[POLICY].peak_replicas <= 6


@pytest.mark.parametrize("reader", [load_trace, workloads_load_trace], ids=["gemop-replay", "replayer"])
@pytest.mark.parametrize(
    ("unit", "scale"), [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)], ids=["s", "ms", "us", "ns"]
)
def test_numeric_times_are_read_in_the_unit_their_size_says(
    tmp_path: Path, reader: Callable[..., Any], unit: str, scale: int
) -> None:
    """Epoch milliseconds read as seconds would stretch 2.5 s of requests over 42 minutes. Both
    trace readers (`gemop replay`'s and the replayer's) read the same files the same way."""
    epoch = 1_709_251_200  # 2024-03-01
    stamps = [epoch * scale + k * scale // 2 if scale > 1 else epoch + k / 2 for k in range(6)]  # every 0.5 s
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("TIMESTAMP\n" + "".join(f"{t}\n" for t in stamps))
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps({"t": t, "count": 2}) + "\n" for t in stamps))
    for path in (csv_path, jsonl):
        a = reader(path)
        assert a.time_unit == unit
        assert sorted({t - a.times[0] for t in a.times}) == pytest.approx([0.5 * k for k in range(6)])
    seconds = reader(csv_path, time_unit="s")
    assert seconds.times[-1] - seconds.times[0] == pytest.approx(2.5 * scale)  # as the user says
    with pytest.raises(ValueError, match="--time-unit must be auto or one of s, ms, us, ns"):
        reader(csv_path, time_unit="minutes")


@pytest.mark.parametrize("reader", [load_trace, workloads_load_trace], ids=["gemop-replay", "replayer"])
def test_an_offset_after_a_long_fraction_is_kept(tmp_path: Path, reader: Callable[..., Any]) -> None:
    # Seven fractional digits then an offset: the offset is kept, so two zones line up.
    q = tmp_path / "zones.csv"
    q.write_text("TIMESTAMP\n2024-03-01T02:00:00.1234567+02:00\n2024-03-01T00:00:01.1234567Z\n")
    a = reader(q)
    assert a.time_unit is None and sorted(t - min(a.times) for t in a.times) == pytest.approx([0.0, 1.0])


def test_the_report_says_how_numeric_times_were_read(
    tmp_path: Path, service: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "ms.csv"
    trace.write_text("TIMESTAMP\n" + "".join(f"{1_709_251_200_000 + 4 * i}\n" for i in range(150_000)))
    assert main(["--trace", str(trace), "--service", str(service)]) == 0
    out = capsys.readouterr().out
    assert "0.17 h" in out  # 600 s, not 600,000
    assert "time stamps: numbers, read as epoch milliseconds (by their size; --time-unit s reads them" in out
    assert main(["--trace", str(trace), "--service", str(service), "--time-unit", "ms", "--output", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["duration_seconds"] == 600 and d["time_stamps"].endswith("(--time-unit ms)")
    seconds = tmp_path / "s.csv"
    seconds.write_text("TIMESTAMP\n" + "".join(f"{1_709_251_200 + i / 250}\n" for i in range(150_000)))
    assert main(["--trace", str(seconds), "--service", str(service)]) == 0
    assert "time stamps" not in capsys.readouterr().out


def test_the_ceiling_is_named_where_it_explains_the_slo_minutes(tmp_path: Path, service: Path) -> None:
    """A trace the service was never sized for: the report says the pools stopped at maxReplicas (or
    at what --cluster-gpus allows), and how many SLO minutes came while they held it."""
    roomy = run_replay(step_trace(tmp_path), service)
    assert (roomy.ceiling_replicas, roomy.ceiling_source) == (40, "spec.autoscaling.maxReplicas")
    assert all(r.ceiling_violation_minutes == 0 for r in roomy.results.values())
    assert "note:" not in roomy.to_table()

    small = tmp_path / "small.yaml"
    small.write_text(SERVICE_YAML.replace("maxReplicas: 40", "maxReplicas: 4"))
    report = run_replay(step_trace(tmp_path), small)
    static = report.results[STATIC_PEAK]
    assert report.ceiling_replicas == 4 and static.peak_replicas > 4 and static.ceiling_violation_minutes == 0
    for k in (POLICY, HPA_RPS):
        r = report.results[k]
        assert 0 < r.ceiling_violation_minutes <= r.slo_violation_minutes
        # A minute counted is over the SLO and reached 4 replicas, so its mean is above 3.
        over = [m for m in range(report.warmup_minutes, report.minutes) if (r.p99_ms_per_minute[m] or 0) > 40]
        assert r.ceiling_violation_minutes <= sum(1 for m in over if r.replicas_per_minute[m] > 3)
    table = report.to_table()
    assert (
        "stop at 4 replicas (spec.autoscaling.maxReplicas); static peak provisioning, which nothing caps, "
        f"holds {static.peak_replicas}"
    ) in table
    assert f"policy: {report.results[POLICY].ceiling_violation_minutes} of its" in table
    assert table.count("raise spec.autoscaling.maxReplicas to let it scale to the load") == 2
    d = report.to_dict(timeline=False)
    assert d["ceiling"] == {"replicas": 4, "set_by": "spec.autoscaling.maxReplicas"}
    assert d["policy"]["slo_violation_minutes_at_ceiling"] == report.results[POLICY].ceiling_violation_minutes

    capped = run_replay(step_trace(tmp_path), service, cluster_gpus=3)
    assert (capped.ceiling_replicas, capped.ceiling_source) == (3, "--cluster-gpus 3 at gpusPerReplica 1")
    assert capped.results[POLICY].ceiling_violation_minutes > 0
    assert "raise --cluster-gpus to let it scale" in capped.to_table()

    # Pods without GPUs: the cluster's GPUs cap nothing (this divided by zero).
    cpu = tmp_path / "cpu.yaml"
    cpu.write_text(
        SERVICE_YAML.replace("gpusPerReplica: 1", "gpusPerReplica: 0").replace("maxReplicas: 40", "maxReplicas: 4")
    )
    cpu_report = run_replay(step_trace(tmp_path), cpu, cluster_gpus=3)
    assert (cpu_report.ceiling_replicas, cpu_report.ceiling_source) == (4, "spec.autoscaling.maxReplicas")


def test_static_peak_is_never_below_min_replicas(tmp_path: Path, service: Path) -> None:
    """A team's minReplicas above what its trace's peak needs (zones, redundancy): static provisioning
    holds it too, or "vs static" would charge the autoscaled pools for a floor static never paid."""
    sized = run_replay(step_trace(tmp_path), service)
    need = sized.results[STATIC_PEAK].peak_replicas
    assert sized.to_dict(timeline=False)["static_peak_sizing"] == {"set_by": "peak load", "peak_load_needs": need}

    floor = tmp_path / "floor.yaml"
    floor.write_text(SERVICE_YAML.replace("minReplicas: 2", f"minReplicas: {need + 5}"))
    report = run_replay(step_trace(tmp_path), floor)
    static, policy = report.results[STATIC_PEAK], report.results[POLICY]
    assert static.peak_replicas == need + 5 and min(policy.replicas_per_minute) >= need + 5
    assert policy.gpu_hours <= static.gpu_hours + 1e-9
    assert (
        f"note: static peak provisioning holds minReplicas, {need + 5} replicas: the peak load needs only {need}"
    ) in report.to_table()
    sizing = report.to_dict(timeline=False)["static_peak_sizing"]
    assert sizing == {"set_by": "spec.autoscaling.minReplicas", "peak_load_needs": need}


def test_a_teams_own_log_names_its_time_field_and_mixes_services(
    tmp_path: Path, service: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An access log as a team exports it: the time in `ts` (CSV) or `@timestamp` as an ISO string
    (JSON lines), two services in one file. --time-column reads the time from there and --where keeps
    one service; without them the errors say which flag reads such a file."""
    rows = [
        ("2026-12-01T10:00:00.250Z" if i == 0 else f"2026-12-01T10:{i // 60:02d}:{i % 60:02d}Z") for i in range(600)
    ]
    csv_trace = tmp_path / "access.csv"
    csv_trace.write_text(
        "ts,service,status\n" + "".join(f"{t},{'ranker' if i % 3 else 'search'},200\n" for i, t in enumerate(rows))
    )
    ranker = TraceFields("ts", (("service", "ranker"),))
    arrivals = load_trace(csv_trace, fields=ranker)
    first_ranker = dt.datetime(2026, 12, 1, 10, 0, 1, tzinfo=dt.UTC).timestamp()  # row 0 is search's
    assert len(arrivals.times) == 400 and arrivals.times[0] == first_ranker
    assert len(load_trace(csv_trace, fields=TraceFields("TS")).times) == 600  # a column's case is not its name
    with pytest.raises(TraceError, match=r"no TIMESTAMP column \(columns: ts, service, status\); --time-column NAME"):
        load_trace(csv_trace)
    with pytest.raises(TraceError, match="no region column for --where region=eu"):
        load_trace(csv_trace, fields=TraceFields("ts", (("region", "eu"),)))
    with pytest.raises(TraceError, match="none of its 600 rows matches --where service=rank"):
        load_trace(csv_trace, fields=TraceFields("ts", (("service", "rank"),)))

    jsonl = tmp_path / "access.jsonl"
    jsonl.write_text(
        "".join(
            json.dumps({"@timestamp": t, "service": "ranker" if i % 3 else "search", "status": 200, "ok": True}) + "\n"
            for i, t in enumerate(rows)
        )
    )
    lines = load_trace(
        jsonl, fields=TraceFields("@timestamp", (("service", "ranker"), ("status", "200"), ("ok", "true")))
    )
    assert lines.times == arrivals.times
    with pytest.raises(
        TraceError, match=r"line 1: missing key 't' \(--time-column NAME reads the time from another key\)"
    ):
        load_trace(jsonl)
    with pytest.raises(TraceError, match="key 'service': expected seconds >= 0 or a date-time"):
        load_trace(jsonl, fields=TraceFields("service"))

    assert parse_where("service=ranker=v2") == ("service", "ranker=v2")
    with pytest.raises(TraceError, match="expected FIELD=VALUE"):
        parse_where("service")
    argv = ["--trace", str(jsonl), "--service", str(service), "--output", "json"]
    assert main([*argv, "--time-column", "@timestamp", "--where", "service=ranker"]) == 0
    assert json.loads(capsys.readouterr().out)["duration_seconds"] > 500
    assert main([*argv, "--time-column", "@timestamp", "--where", "service"]) == 2
    assert "--where 'service': expected FIELD=VALUE" in capsys.readouterr().err


def test_a_service_with_its_autoscaler_off_is_told_what_enabling_it_would_do(tmp_path: Path) -> None:
    """A team replays the service it runs today, with the built-in autoscaler off and spec.replicas
    set: the report says the operator holds those replicas, and the policy row is the what-if."""
    off = tmp_path / "off.yaml"
    off.write_text(SERVICE_YAML.replace("autoscaling: {", "replicas: 7\n  autoscaling: {enabled: false, "))
    report = run_replay(step_trace(tmp_path), off)
    note = (
        "note: spec.autoscaling.enabled is false: the operator holds spec.replicas (7) for this service; "
        "the policy row is what enabling the autoscaler would do"
    )
    assert note in report.to_table()
    assert report.to_dict(timeline=False)["autoscaling_disabled"] == {"replicas": 7}
    on_file = tmp_path / "on.yaml"
    on_file.write_text(SERVICE_YAML)
    on = run_replay(step_trace(tmp_path), on_file)
    assert "autoscaling_disabled" not in on.to_dict(timeline=False)
    assert "spec.autoscaling.enabled is false" not in on.to_table()
    assert on.results[POLICY].gpu_hours == report.results[POLICY].gpu_hours  # the what-if runs as if on


def test_a_fleet_whose_p99_needs_a_lower_target_is_told_the_one_the_loop_learned(tmp_path: Path, service: Path) -> None:
    """A fleet whose p99 is a straight line from 15 ms idle to 75 ms at full load: the 40 ms SLO
    falls at 42 % of a pod's load, well below the declared 0.6, and the SLO loop spends the replay
    cutting its way down. The report names the target it learned, to declare instead; on the
    default curve it says nothing. (On a line to 60 ms the loop now stops near 0.55, where a cut
    under the SLO stopped buying p99: `steps/slo_loop.py`.)"""
    profile = tmp_path / "steep-line.json"
    profile.write_text(json.dumps({"latency_p99_ms": [[0.0, 15.0], [1.0, 75.0]]}))
    report = run_replay(step_trace(tmp_path), service, profile=profile)
    path = [t for t in report.results[POLICY].effective_target_per_minute if t is not None]
    learned = report.learned_target()
    assert learned is not None and learned.declared == 0.6
    assert learned.end == path[-1] and learned.highest <= LEARNED_BELOW * 0.6
    assert learned.minutes == report.minutes - report.minutes // 2
    table = report.to_table()
    assert (
        f"note: policy: the SLO loop held the SM target at or below {learned.highest:.2f} "
        f"({learned.highest / 0.6:.2f} x targetSmActive 0.6) for the last {learned.minutes} min"
    ) in table
    assert f"declare spec.autoscaling.targetSmActive near {learned.end:.2f}" in table
    assert report.to_dict(timeline=False)["learned_target"]["end"] == round(learned.end, 3)
    # A live pool's TargetLearned condition turns True half an hour into its run of low targets.
    turned = learned.condition_minute
    per_minute = report.results[POLICY].effective_target_per_minute
    assert turned is not None and report.to_dict(timeline=False)["learned_target"]["condition_true_at_minute"] == turned
    held = [t for t in per_minute[turned - 29 : turned + 1] if t is not None]
    assert held and max(held) <= LEARNED_BELOW * 0.6
    first_low = next(m for m, t in enumerate(per_minute) if t is not None and t <= LEARNED_BELOW * 0.6)
    assert turned == first_low + 30  # the run began in the first minute that ended low, and held
    assert report.results[POLICY].target_learned_reason == "HeldBelowDeclared" and not learned.at_floor
    assert f"TargetLearned condition turns True at minute {turned}" in table
    plain = run_replay(step_trace(tmp_path), service)
    assert plain.learned_target() is None and "learned_target" not in plain.to_dict(timeline=False)
    assert "SLO loop held" not in plain.to_table()


def test_a_fleet_whose_slo_needs_less_than_the_loops_floor_is_told_so_not_to_declare_the_floor(
    tmp_path: Path, service: Path
) -> None:
    """A p99 of 30 ms idle and 40 ms (the SLO) at a fifth of a pod's load: the loop cuts to its floor
    (0.5 x 0.6) and holds it, still over the SLO. Declaring 0.3 would only save the first windows,
    so the note and the live condition say the loop is at its floor, not "declare near 0.30"."""
    profile = tmp_path / "harsh.json"
    profile.write_text(json.dumps({"latency_p99_ms": [[0.0, 30.0], [0.2, 40.0], [1.0, 120.0]]}))
    report = run_replay(step_trace(tmp_path), service, profile=profile)
    pol = report.results[POLICY]
    assert report.loop_floor == pytest.approx(0.3) and pol.target_learned_reason == "HeldAtFloor"
    learned = report.learned_target()
    assert learned is not None and learned.at_floor and learned.end == pytest.approx(0.3)
    assert report.to_dict(timeline=False)["learned_target"]["at_loop_floor"] is True
    table = report.to_table()
    assert "ended at 0.30, the loop's floor (sloFeedback.minTargetFraction)" in table
    assert "declare spec.autoscaling.targetSmActive near" not in table
    assert f"TargetLearned condition turns True at minute {pol.target_learned_minute}" in table


@pytest.mark.parametrize(
    ("second_half", "said"),
    [
        ([0.48, 0.40, 0.45], True),  # at most 0.8 x 0.6 throughout
        ([0.48, 0.40, 0.49], False),  # one minute above: a cut it was giving back
        ([None, 0.42, None], True),  # minutes with no decision are not read
        ([None, None, None], False),  # no path: nothing to say
    ],
)
def test_only_a_whole_second_half_well_below_the_declared_target_is_said(
    second_half: list[float | None], said: bool
) -> None:
    pol = pool_result(POLICY)
    pol.effective_target_per_minute = [0.6, 0.5, 0.5, *second_half]
    report = replay_report({POLICY: pol}, minutes=6, target_sm_active=0.6)
    learned = report.learned_target()
    assert (learned is not None) == said
    if learned is not None:
        assert learned.end == [t for t in second_half if t is not None][-1] and learned.minutes == 3
    undeclared = dataclasses.replace(report, target_sm_active=None)
    assert undeclared.learned_target() is None


def test_main_json_table_and_plot(tmp_path: Path, service: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = step_trace(tmp_path)
    png = tmp_path / "replay.png"
    assert main(["--trace", str(trace), "--service", str(service), "--output", "json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"]["peak_replicas"] >= 10
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert main(["--trace", str(trace), "--service", str(service), "--scale", "0.5"]) == 0
    assert "GPU-h" in capsys.readouterr().out


def test_main_reports_bad_input(tmp_path: Path, service: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0}\n{"t": oops}\n')
    assert main(["--trace", str(bad), "--service", str(service)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl: line 2, column 7" in err
    prof = tmp_path / "p.json"
    prof.write_text("{}")
    assert main(["--trace", str(step_trace(tmp_path)), "--service", str(service), "--profile", str(prof)]) == 0


@pytest.mark.parametrize(("target", "level"), [(0.030001, 300.0), (0.6, 5e9)])
def test_a_static_pool_too_large_to_simulate_is_an_error_not_a_memory_error(target: float, level: float) -> None:
    """A targetSmActive just above an idle pod's SM active (a sliver of a pod's work) or a huge --scale
    sized the static peak pool, which maxReplicas does not cap, at billions of replicas: a
    MemoryError. Now an error that says which knob to turn."""
    spec = RankingServiceSpec.model_validate(
        {"model": {"uri": "s3://m/r"}, "autoscaling": {"maxReplicas": 4, "targetSmActive": target}}
    )
    load = np.full(120, level)
    with pytest.raises(TraceError, match=r"would need [\d,]+ replicas .* takes at most 1,000,000: lower --scale"):
        simulate(LoadSeries(cost=load, requests=load), spec, ServiceModel())


@pytest.mark.parametrize(("target", "idle"), [(1e-6, 0.03), (0.4, 0.5), (0.5, 0.5)])
def test_a_target_no_load_reaches_names_the_target_and_the_profile(target: float, idle: float) -> None:
    """At or below the SM active an idle pod shows, no load per replica shows the target: the pools
    were sized at a vanishing share of a replica (the error said only "would need 10^16 replicas")."""
    spec = RankingServiceSpec.model_validate({"model": {"uri": "s3://m/r"}, "autoscaling": {"targetSmActive": target}})
    load = np.full(120, 300.0)
    model = ServiceModel(sm_active=((0.0, idle), (1.0, 0.95)))
    with pytest.raises(TraceError, match=rf"targetSmActive {target} is at or below .* \({idle:g} at zero load"):
        simulate(LoadSeries(cost=load, requests=load), spec, model)


def test_plot_from_simulate(tmp_path: Path) -> None:
    spec = RankingServiceSpec.model_validate(
        {"model": {"uri": "s3://m/r"}, "autoscaling": {"minReplicas": 1, "maxReplicas": 10}}
    )
    load = np.full(600, 300.0)
    report = simulate(LoadSeries(cost=load, requests=load), spec, ServiceModel())
    out = plot_report(report, tmp_path / "p.png", title="flat")
    assert out.exists()


def test_pool_queue_seconds_is_queued_work_over_ready_capacity() -> None:
    m = ServiceModel()
    pool = Pool(m)
    assert pool.queue_seconds(0.0) is None  # no Ready pod: no server to report a queue
    pool.created = [-m.startup_seconds] * 2  # two Ready pods: 400 units/s
    pool.step(1000.0, 0.0, 1.0)  # 600 units queue up
    assert pool.queue_seconds(0.0) == pytest.approx(600 / 400)


def test_rps_baseline_calibrated_on_the_runs_cost_per_request() -> None:
    """Requests that each cost 2 units: the RPS target halves, so it sizes like the SM policy at
    targetSmActive (the policy with its SLO loop off: the loop may then run hotter, the p99 allowing)."""
    n = 1800
    load = LoadSeries(cost=np.full(n, 1000.0), requests=np.full(n, 500.0))
    spec = load_service_text(SERVICE_YAML)
    plain = spec.model_copy(
        update={"autoscaling": spec.autoscaling.model_copy(update={"slo_feedback": SloFeedback(enabled=False)})}
    )
    report = simulate(load, spec, ServiceModel(), spec_override=plain)
    pol, rps = report.results[POLICY], report.results[HPA_RPS]
    assert rps.replicas_per_minute[-1] == pytest.approx(pol.replicas_per_minute[-1], abs=1)
    assert rps.slo_violation_minutes == 0
    # A lower utilisation target for RPS (the bench's equal-GPU-hour comparison) holds more replicas.
    more = simulate(load, spec, ServiceModel(), rps_utilisation=0.3).results[HPA_RPS]
    assert more.gpu_hours > rps.gpu_hours * 1.5


def test_queue_signal_speeds_up_recovery_from_overload() -> None:
    """A 4x step: with the queue signal the policy orders what the arrivals need before the first new
    pod serves; without it, it doubles. The backlog is drained flat out, not sized at the target,
    so the pool's peak stays within twice that need (sized at the target it reached 40 of 16)."""
    n = 1200
    cost = np.where(np.arange(n) >= 300, 2000.0, 500.0)
    load = LoadSeries(cost=cost, requests=cost.copy())
    on = load_service_text(SERVICE_YAML)
    off = load_service_text(
        SERVICE_YAML.replace("targetSmActive: 0.6}", "targetSmActive: 0.6, metrics: {queue: {enabled: false}}}")
    )
    with_q = simulate(load, on, ServiceModel()).results[POLICY]
    without = simulate(load, off, ServiceModel()).results[POLICY]
    assert with_q.slo_violation_minutes < without.slo_violation_minutes
    need = 2000 / (ServiceModel().utilisation_for_sm(0.6) * 200)
    first_serves = with_q.events[0][0] + ServiceModel().startup_seconds
    ordered = max(e[2] for e in with_q.events if e[3] == "up" and e[0] < first_serves)
    assert ordered >= need
    assert with_q.peak_replicas <= 2 * need


def load_service_text(text: str) -> RankingServiceSpec:
    return RankingServiceSpec.model_validate(yaml.safe_load(text)["spec"])


# --------------------------------------------------------------------------- scale modes, warm-up, latency


def poisson_arrivals(rate: float, seconds: int, seed: int = 3) -> Arrivals:
    counts = np.random.default_rng(seed).poisson(rate, seconds).astype(float)
    return Arrivals(list(map(float, range(seconds))), counts.tolist(), counts.tolist(), "poisson")


def test_scale_modes_on_a_poisson_trace() -> None:
    """5 req/s Poisson scaled 100x: duplicate swings +-45 % per second, independent +-4.5 % (Poisson at 500/s)."""
    a = poisson_arrivals(5.0, 3600)
    dup = to_series(a, scale=100, mode="duplicate", smooth_seconds=1)
    ind = to_series(a, scale=100, mode="independent")
    mid = slice(300, 3300)
    for s in (dup, ind):
        assert float(s.requests[mid].mean()) == pytest.approx(500.0, rel=0.02)
    assert float(dup.requests[mid].std() / dup.requests[mid].mean()) == pytest.approx(0.447, rel=0.1)
    # N = sqrt(X) c + (X - sqrt(X)) m, m the 300 s trend of c: Poisson(500)'s variance plus the
    # trend's own estimation noise, Var = X r + (X - sqrt X)^2 r / 300 + 2 sqrt X (X - sqrt X) r / 300.
    x, r, w = 100.0, 5.0, 300.0
    var = x * r + (x - x**0.5) ** 2 * r / w + 2 * x**0.5 * (x - x**0.5) * r / w
    assert float(ind.requests[mid].std()) == pytest.approx(var**0.5, rel=0.1)
    assert float(ind.requests[mid].std() / ind.requests[mid].mean()) < 0.06
    # Totals are kept in both modes (the trend and the residual both sum to the trace's own).
    assert float(ind.requests.sum()) == pytest.approx(100 * sum(a.counts), rel=0.01)


def test_independent_mode_keeps_the_common_trend_x_fold() -> None:
    """A known intensity (a synthetic trace's rate) is what every copy shares: a 3x crowd stays 3x."""
    rate = np.full(1200, 4.0)
    rate[600:720] *= 3
    counts = np.random.default_rng(1).poisson(rate).astype(float)
    a = Arrivals(list(map(float, range(1200))), counts.tolist(), counts.tolist(), "crowd")
    s = to_series(a, scale=200, mode="independent", trend=rate)
    assert float(s.requests[610:710].mean()) == pytest.approx(2400.0, rel=0.03)
    assert float(s.requests[100:500].mean()) == pytest.approx(800.0, rel=0.03)
    with pytest.raises(TraceError, match="trend has 5 seconds"):
        to_series(a, scale=2, trend=rate[:5])
    with pytest.raises(TraceError, match="--scale-mode"):
        to_series(a, scale=2, mode="bogus")  # type: ignore[arg-type]
    # Scaling down is thinning in expectation in both modes.
    assert to_series(a, scale=0.5, mode="independent").requests.tolist() == (counts * 0.5).tolist()


def test_report_header_names_the_mode_and_warm_up_is_apart(tmp_path: Path, service: Path) -> None:
    # A 4x surge in minute 1, before any decision can have taken effect: warm-up.
    rate = [2000 if 60 <= t < 150 else 500 for t in range(1800)]
    lines = [json.dumps({"t": t, "count": r, "cost": r}) for t, r in enumerate(rate)]
    p = tmp_path / "hot-start.jsonl"
    p.write_text("\n".join(lines) + "\n")
    report = run_replay(p, service, scale_mode="duplicate", smooth_seconds=1)
    assert report.warmup_minutes == 3 and report.judged_minutes == 27
    pol = report.results[POLICY]
    assert pol.warmup_violation_minutes >= 1  # the surge, counted apart
    assert pol.judged_minutes == 27
    over = [m for m, q in enumerate(pol.p99_ms_per_minute) if q is not None and q > 40]
    assert pol.warmup_violation_minutes == sum(1 for m in over if m < 3)
    assert pol.slo_violation_minutes == sum(1 for m in over if m >= 3)
    table = report.to_table()
    assert "scale mode duplicate" in table and "warm-up: the first 3 min" in table
    d = report.to_dict(timeline=False)
    assert d["scale_mode"] == "duplicate" and d["policy"]["warmup_violation_minutes"] == pol.warmup_violation_minutes


def test_cli_scale_mode(tmp_path: Path, service: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = step_trace(tmp_path)
    assert main(["--trace", str(trace), "--service", str(service), "--scale", "2"]) == 0
    assert "scale mode independent" in capsys.readouterr().out
    assert main(["--trace", str(trace), "--service", str(service), "--scale-mode", "duplicate"]) == 0
    assert "scale mode duplicate" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--trace", str(trace), "--service", str(service), "--scale-mode", "users"])
    assert exc.value.code == 2
    assert "--scale-mode" in capsys.readouterr().err


def test_replay_feeds_the_latency_to_the_policy(tmp_path: Path) -> None:
    """Noisy traffic on few replicas: the replay's p99 reaches the policy, which lowers its SM target."""
    spec = RankingServiceSpec.model_validate(
        {
            "model": {"uri": "s3://m/r"},
            "slo": {"p99LatencyMs": 30},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 40, "targetSmActive": 0.7},
        }
    )
    load = to_series(poisson_arrivals(3.0, 2400), scale=100, mode="duplicate", smooth_seconds=3)
    report = simulate(load, spec, ServiceModel(), scale=100, scale_mode="duplicate")
    targets = [t for t in report.results[POLICY].effective_target_per_minute if t is not None]
    assert min(targets) < 0.7 * 0.95 and max(targets) <= 0.7
    off = spec.model_copy(deep=True)
    off.autoscaling.slo_feedback.enabled = False
    plain = simulate(load, off, ServiceModel(), scale=100, scale_mode="duplicate")
    assert set(plain.results[POLICY].effective_target_per_minute) <= {0.7, None}
    # A lower target keeps more replicas and fewer minutes over the SLO.
    assert report.results[POLICY].mean_replicas > plain.results[POLICY].mean_replicas
    assert report.results[POLICY].slo_violation_minutes < plain.results[POLICY].slo_violation_minutes


def test_each_pod_is_read_over_its_own_ready_seconds() -> None:
    """A pod that became Ready at the sync has no sample; one Ready mid-interval is read over its seconds."""
    m = ServiceModel()
    pool = Pool(m)
    start = m.startup_seconds
    # Two pods Ready long ago, one Ready at t=10 (created 10 - start), one Ready exactly at t=15.
    pool.created = [-start, -start, 10.0 - start, 15.0 - start]
    sm = [0.9] * 10 + [0.3] * 5  # saturated before the third pod, lighter after
    win = Window(sm=sm, requests=[300.0] * 15, ready=[2] * 10 + [3] * 5)
    got = win.per_pod("sm", pool, 15.0, 0, 15)
    assert len(got) == 4
    assert got[0] == got[1] == pytest.approx((0.9 * 10 + 0.3 * 5) / 15)
    assert got[2] == pytest.approx(0.3)  # only its own 5 Ready seconds
    assert got[3] is None  # Ready at the sync: not reported with the pool's saturated SM
    rps = win.per_pod("requests", pool, 15.0, 0, 15)
    assert rps[0] == pytest.approx((150.0 * 10 + 100.0 * 5) / 15)  # requests shared by the pods Ready then
    assert rps[2] == pytest.approx(100.0) and rps[3] is None
    # The observation carries exactly the pods with a sample; the others count as missing.
    obs = pool_observation(pool, 15.0, got, 1, None)
    assert sorted(obs.metrics.samples) == ["pod-0", "pod-1", "pod-2"]
    assert [p.serving for p in obs.pods] == [True, True, True, True]


def _decision(
    current: int, desired: int, *, held: bool = False, p99: float | None = None, bound: bool = False
) -> Decision:
    limits = (Limit("bounds", "TooManyReplicas", "capped at maxReplicas=8", current, desired),) if bound else ()
    return Decision(desired, current, "test", (), held=held, p99_ms=p99, limits=limits)


@pytest.mark.parametrize(
    ("decision", "why"),
    [
        (_decision(10, 8, p99=30.0), None),  # under the SLO: a scale-down it may make
        (_decision(10, 8), None),  # no fresh p99 (the SLO loop holds), the SM reading sized it
        (_decision(10, 8, p99=41.0), "scale-down 10 -> 8 on a fresh p99 of 41.0 ms over the SLO"),
        (_decision(10, 8, held=True), "scale-down 10 -> 8 with no usable SM reading"),
        (_decision(10, 12, p99=90.0), None),  # a scale-up over the SLO is what it should do
        (_decision(10, 10, held=True), None),
        # maxReplicas lowered to 8 under the pool: the bounds bring it down, whatever the p99 or the reading.
        (_decision(10, 8, p99=41.0, bound=True), None),
        (_decision(10, 8, held=True, bound=True), None),
    ],
)
def test_a_scale_down_the_policy_never_makes_is_named(decision: Decision, why: str | None) -> None:
    assert unsafe_scale_down(decision, 40.0) == why


def test_the_replay_records_every_scale_down_the_policy_never_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flat load's replay has none; a policy that sheds a replica at every sync on a p99 it
    reads as over the SLO has one at each of those syncs, with its time."""
    spec = load_service_text(SERVICE_YAML)
    load = np.full(900, 1500.0)
    assert simulate(LoadSeries(cost=load, requests=load), spec, ServiceModel()).results[POLICY].unsafe_scale_downs == []
    real = autoscalers.desired_replicas

    def shedding(*args: Any, **kwargs: Any) -> Decision:
        d = real(*args, **kwargs)
        return dataclasses.replace(d, desired_replicas=max(2, d.current_replicas - 1), p99_ms=55.0)

    monkeypatch.setattr(autoscalers, "desired_replicas", shedding)
    pol = simulate(LoadSeries(cost=load, requests=load), spec, ServiceModel()).results[POLICY]
    assert pol.unsafe_scale_downs and pol.unsafe_scale_downs[0][0] == 15.0
    assert all(why.endswith("on a fresh p99 of 55.0 ms over the SLO") for _, why in pol.unsafe_scale_downs)
