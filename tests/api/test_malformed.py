"""Every case of the malformed-resource corpus is rejected twice, each time naming the field."""

from __future__ import annotations

import collections

import pytest

from gem_operator.api.kinds import kind_info
from gem_operator.api.schema_check import validate_manifest
from gem_operator.api.validation import MAX_DEPTH, InvalidSpec, parse_spec, too_deep
from gem_testbed.faults.malformed import CASES, Case, deep


def test_the_corpus_covers_the_three_kinds() -> None:
    per_kind = collections.Counter(c.kind for c in CASES)
    assert len(CASES) >= 60 and set(per_kind) == {"GEMTraining", "RankingService", "SolarisPrecompute"}
    assert min(per_kind.values()) >= 20
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_schema_and_operator_both_reject_naming_the_field(case: Case) -> None:
    manifest = case.manifest()
    schema = validate_manifest(manifest)
    assert any(case.field in e for e in schema), schema
    with pytest.raises(InvalidSpec) as info:
        parse_spec(kind_info(case.kind), manifest)
    assert any(f"spec.{case.field}" in p or case.field in p for p in info.value.problems), info.value.problems


def test_strict_types_no_coercion() -> None:
    base = next(c for c in CASES if c.name == "gem-suspend-yes").manifest()
    with pytest.raises(InvalidSpec, match=r"spec.suspend: Input should be a valid boolean \(got 'yes'\)"):
        parse_spec(kind_info("GEMTraining"), base)
    base["spec"]["suspend"] = False
    base["spec"]["parallelism"]["pp"] = True
    with pytest.raises(InvalidSpec, match=r"spec.parallelism.pp: Input should be a valid integer"):
        parse_spec(kind_info("GEMTraining"), base)


def test_depth_is_measured_without_recursion() -> None:
    assert too_deep({"a": [{"b": 1}]}) is None
    path = too_deep({"w": deep(5000)()})
    assert path is not None and path.startswith("spec.w.x.x")
    assert path.count(".x") == MAX_DEPTH
