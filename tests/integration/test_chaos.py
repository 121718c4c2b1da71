"""A bounded run of the chaos suite (bench/chaos.py runs it long): kill points, API faults, the
malformed corpus through the API and the operator. HA takeover is tests/integration/test_ha.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gem_testbed.faults import chaos
from gem_testbed.faults.malformed import CASES

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_kill_points_leave_exact_children_and_consistent_rank_maps(tmp_path: Path) -> None:
    report = chaos.kill_points(6, tmp_path, seed=11, check_every=3, log=lambda _: None)
    assert report.points == 6 and report.checks == 2
    assert report.unconverged == 0 and report.violations == []


def test_a_gang_and_pools_converge_under_ten_percent_faults(tmp_path: Path) -> None:
    report = chaos.faults(0.10, tmp_path, pods=8, timeout=90)
    assert report.training_seconds is not None and report.pools_seconds is not None
    assert report.change_seconds is not None and report.violations == []
    assert report.counts.get("500") and report.counts.get("429") and report.counts.get("watch_cut")
    assert report.liveness_p99 < 1.0


def test_malformed_resources_are_refused_or_marked_invalid_naming_the_field(tmp_path: Path) -> None:
    # Every case the API server admits (only the operator can judge it), and a sample of the rest.
    from gem_operator.api.kinds import kind_info
    from gem_operator.api.schema_check import schema_errors

    admitted = [c for c in CASES if not schema_errors(kind_info(c.kind), c.manifest())]
    sample = [*admitted, *CASES[::9]]
    report = chaos.malformed(tmp_path, sample)
    assert report.problems == []
    assert report.invalid_spec == len(admitted) >= 3
    assert report.refused_at_door == len(sample) - len(admitted)
