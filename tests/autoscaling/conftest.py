"""What the autoscaling tests share: loading a bench script as a module, and a pool's replay result."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from gem_operator.replay.report import PoolResult, ReplayReport
from gem_operator.replay.service_model import ServiceModel

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """A module of `bench/`, loaded from its file (the benches are scripts, not a package). bench/
    goes on sys.path first, as when a bench runs as a script: they import each other by name."""
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))
    loaded = importlib.util.spec_from_file_location(f"{name}_for_tests", BENCH_DIR / f"{name}.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules[loaded.name] = module
    loaded.loader.exec_module(module)
    return module


def pool_result(
    name: str, gpu_hours: float = 1.0, violations: int = 0, judged: int = 57, changes: float = 1.0
) -> PoolResult:
    """A pool's replay result with the figures a report's summary reads, and no timeline."""
    return PoolResult(
        name=name,
        gpu_hours=gpu_hours,
        slo_violation_minutes=violations,
        direction_changes_per_hour=changes,
        peak_replicas=1,
        scaling_events=0,
        mean_replicas=1.0,
        replicas_per_minute=[],
        p99_ms_per_minute=[],
        sm_active_per_minute=[],
        judged_minutes=judged,
    )


def replay_report(results: dict[str, PoolResult], minutes: int = 60, **fields: Any) -> ReplayReport:
    """A report of `minutes` of a flat load over `results`, at a 40 ms SLO; `fields` set the rest."""
    return ReplayReport(
        duration_seconds=60 * minutes,
        slo_ms=40.0,
        service="s",
        trace="t",
        scale=1.0,
        model=ServiceModel(),
        load_per_minute=[1.0] * minutes,
        requests_per_minute=[1.0] * minutes,
        results=results,
        **fields,
    )
