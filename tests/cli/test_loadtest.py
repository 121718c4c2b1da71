"""`gemop loadtest`: segments, the fluid model it derives, the client-side figures, bad input.

The closed loop itself runs in tests/integration/test_closed_loop.py; these tests need no servers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_operator.cli import main
from gem_operator.replay.engine import STATIC_PEAK, load_service, run_replay
from gem_operator.replay.service_model import Pool, weighted_quantile
from gem_testbed.drivers.closed_loop import PoolRun, Sample
from gem_testbed.drivers.loadtest import LoadtestError, cut_segment, device_service_model, pool_figures

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "bench" / "loadtest-rankingservice.yaml"


def _trace(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_segment_cuts_scales_and_shifts(tmp_path: Path) -> None:
    trace = _trace(tmp_path, [{"t": float(t), "cost": 1} for t in range(0, 600)])  # 1 request/s for 10 min
    seg = cut_segment(trace, start_minute=2, minutes=3, scale=2.5, seed=1)
    assert seg.seconds == 180 and all(0 <= t < 180 for t in seg.times)
    assert 2.3 * 180 <= len(seg.times) <= 2.7 * 180  # 2.5 copies per request on average
    assert seg.times == sorted(seg.times)
    assert seg.peak_rps() == pytest.approx(2.5, rel=0.2)
    with pytest.raises(ValueError, match="no requests between minute 20"):
        cut_segment(trace, 20, 1, 1.0)
    with pytest.raises(ValueError, match="--scale must be a positive number"):
        cut_segment(trace, 0, 1, 0.0)


def test_fluid_model_of_the_emulated_service() -> None:
    _, spec = load_service(SERVICE)
    model = device_service_model(spec, candidates=16, seq_len=16, startup_s=20.0)
    # h200 profile: 0.996 ms for a one-request batch of <= 64 candidates, x200 time scale.
    assert model.throughput_per_replica == pytest.approx(1 / 0.1992, rel=1e-3)
    assert model.sm_active == ((0.0, 0.0), (1.0, 1.0))
    assert model.startup_seconds == 20.0
    assert model.p99_ms(0.0) == pytest.approx(199.2, rel=0.01)
    # The default p99 model simulates the replicas behind the front (`round_robin`); the curve
    # left on the model is one replica's M/D/1: about 6 service times at 60 %.
    assert model.service_seconds == pytest.approx(0.1992, rel=1e-3)
    assert model.p99_ms(0.6) == pytest.approx(6.12 * 199.2, rel=0.02)
    single = device_service_model(spec, 16, 16, 20.0, latency="single-server")
    assert single.service_seconds == 0 and single.p99_ms(0.6) == pytest.approx(6.12 * 199.2, rel=0.02)
    batching = device_service_model(spec, 16, 16, 20.0, latency="batching")
    assert batching.p99_ms(0.6) == pytest.approx(24 / 18 * 199.2, rel=0.02)
    with pytest.raises(LoadtestError, match="latency model"):
        device_service_model(spec, 16, 16, 20.0, latency="mm1")


def test_round_robin_pool_queues_less_with_more_replicas_at_equal_utilisation() -> None:
    _, spec = load_service(SERVICE)
    model = device_service_model(spec, 16, 16, startup_s=0.0)
    p99s = []
    for ready in (1, 2, 4, 8, 16):
        pool = Pool(model, created=[-1.0] * ready)
        load = 0.6 * ready * model.throughput_per_replica
        steps = [pool.step(load, now=float(t), dt=1.0) for t in range(300)]
        p99s.append(weighted_quantile([p for _, _, p in steps], [load] * len(steps), 0.99))
        assert sum(u for u, _, _ in steps) / len(steps) == pytest.approx(0.6, abs=0.05)
    assert p99s == sorted(p99s, reverse=True) and p99s[0] > 2 * p99s[-1], p99s


def test_replay_takes_the_static_pool_the_load_test_ran(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"t": {i / 20:.3f}, "cost": 1}}\n' for i in range(20 * 180)))
    sized = run_replay(trace, SERVICE)
    fixed = run_replay(trace, SERVICE, static_replicas=3)
    assert fixed.results[STATIC_PEAK].peak_replicas == 3 != sized.results[STATIC_PEAK].peak_replicas


def test_service_without_an_emulated_device_or_with_batching_is_refused() -> None:
    _, spec = load_service(SERVICE)
    plain = spec.model_copy(update={"workload": spec.workload.model_copy(update={"args": ["--threads", "1"]})})
    with pytest.raises(LoadtestError, match="--device emulated:h200"):
        device_service_model(plain, 16, 16, 10)
    batched = spec.model_copy(update={"max_batch_size": 8})
    with pytest.raises(LoadtestError, match="maxBatchSize: 1"):
        device_service_model(batched, 16, 16, 10)


def test_figures_count_errors_as_misses_and_replica_seconds_as_gpu_time() -> None:
    records = [{"t": 1.0 + i * 0.1, "ms": 50.0, "status": "200", "candidates": 16} for i in range(200)]
    records += [{"t": 70.0 + i * 0.1, "ms": 50.0, "status": "200", "candidates": 16} for i in range(95)]
    records += [{"t": 80.0 + i, "ms": 10.0, "status": "503", "candidates": 16} for i in range(5)]
    samples = [Sample(float(t), 2 if t < 60 else 4, 2, 2 if t < 60 else 4) for t in range(121)]
    fig = pool_figures(PoolRun("policy", records, samples, [12.0, 14.0]), slo_ms=100, seconds=120, gpus=1)
    assert fig["gpu_hours"] == pytest.approx((60 * 2 + 60 * 4) / 3600, rel=0.02)
    assert fig["slo_violation_minutes"] == 1  # minute 1: 5 % of its requests failed, so p99 is a miss
    assert fig["timeline"][1]["p99_is_miss"] and fig["timeline"][0]["p99_ms"] == 50.0
    assert fig["errors"] == 5 and fig["requests"] == 300
    assert fig["peak_replicas"] == 4 and fig["scaling_events"] == 1 and fig["direction_changes_per_hour"] == 0
    assert fig["mean_startup_seconds"] == 13.0
    assert not math.isnan(fig["gpu_hours"])
    # Judged as `gemop replay` judges: a miss before the first decision can act is warm-up.
    warm = pool_figures(PoolRun("policy", records, samples, [12.0]), slo_ms=100, seconds=120, gpus=1, warmup_minutes=2)
    assert warm["slo_violation_minutes"] == 0 and warm["warmup_violation_minutes"] == 1


def test_bad_flags_and_services_get_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path, [{"t": float(t), "cost": 1} for t in range(120)])
    assert main(["loadtest", "--trace", str(trace), "--service", str(SERVICE), "--pools", "policy,kpa"]) == 2
    assert "unknown ['kpa']" in capsys.readouterr().err
    assert main(["loadtest", "--trace", str(trace), "--service", str(SERVICE), "--origin-rate", "fast"]) == 2
    assert "--origin-rate" in capsys.readouterr().err
    doc = yaml.safe_load(SERVICE.read_text())
    doc["spec"]["autoscaling"]["maxReplicas"] = 64
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(doc))
    assert main(["loadtest", "--trace", str(trace), "--service", str(big), "--max-pod-processes", "8"]) == 2
    err = capsys.readouterr().err
    assert "at most 8 pods run as processes" in err and "--max-pod-processes" in err
    doc["spec"]["workload"]["args"] = []
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(doc))
    assert main(["loadtest", "--trace", str(trace), "--service", str(bare)]) == 2
    assert "emulated device" in capsys.readouterr().err
    assert main(["loadtest", "--trace", str(tmp_path / "missing.csv"), "--service", str(SERVICE)]) == 2
    assert "missing.csv" in capsys.readouterr().err


def test_sim_up_run_pods_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "up", "--run-pods", "--origin", "s3://bucket/model"]) == 2
    assert "--origin URI=PATH" in capsys.readouterr().err
    assert main(["sim", "up", "--origin", "s3://b/m=/srv/m"]) == 2  # --origin without --run-pods


def test_segment_reads_numeric_times_as_gemop_replay_does(tmp_path: Path) -> None:
    """Epoch milliseconds, the usual form in logs: read by their size (and said so), or in the unit
    named; read as seconds they would put 10 minutes of requests 166 hours apart."""
    start_ms = 1_700_000_000_000
    trace = _trace(tmp_path, [{"t": start_ms + 1000 * t, "cost": 1} for t in range(600)])
    seg = cut_segment(trace, start_minute=2, minutes=3, scale=1.0, seed=1)
    assert seg.seconds == 180 and len(seg.times) == 180
    assert (
        seg.time_note
        == "time stamps: numbers, read as epoch milliseconds (by their size; --time-unit s reads them as seconds)"
    )
    named = cut_segment(trace, start_minute=2, minutes=3, scale=1.0, seed=1, time_unit="ms")
    assert named.times == seg.times and named.time_note.endswith("(--time-unit ms)")
    with pytest.raises(ValueError, match="no requests between minute 2 and 5"):
        cut_segment(trace, start_minute=2, minutes=3, scale=1.0, time_unit="s")
    assert cut_segment(_trace(tmp_path, [{"t": float(t), "cost": 1} for t in range(60)]), 0, 1, 1.0).time_note == ""


def test_segment_of_one_service_from_a_teams_own_log(tmp_path: Path) -> None:
    """The load test cuts its segment as `gemop replay` reads the trace: --time-column, --where."""
    from gem_operator.replay.traces import TraceFields

    rows = [{"@timestamp": 1_700_000_000 + t, "service": "ranker" if t % 2 else "search"} for t in range(600)]
    trace = _trace(tmp_path, rows)
    seg = cut_segment(trace, 0, 10, 1.0, fields=TraceFields("@timestamp", (("service", "ranker"),)))
    assert len(seg.times) == 300 and seg.seconds == 600
    with pytest.raises(ValueError, match="missing key 't' \\(--time-column NAME"):
        cut_segment(trace, 0, 10, 1.0)
