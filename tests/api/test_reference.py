"""The API reference: rows generated from the CRD schema, and the page in docs/ kept in sync."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import pytest
from pydantic import Field

from gem_operator.api.common import ApiModel
from gem_operator.api.crd import gem_crds, model_schema
from gem_operator.api.reference import FieldRow, api_reference, field_rows, render_reference, rule_rows
from gem_operator.cli import main

ROOT = Path(__file__).resolve().parents[2]


class _Mode(StrEnum):
    FAST = "Fast"
    SAFE = "Safe"


class _Port(ApiModel):
    name: str = Field(pattern=r"^[a-z]+$", max_length=15, description="Port name | label.")
    number: int = Field(ge=1, le=65535, description="Port number.")


class _Inner(ApiModel):
    ratio: float = Field(default=0.5, gt=0, le=1, description="A share of <something>.")


class _Example(ApiModel):
    """An example spec."""

    replicas: int = Field(default=1, ge=0, le=100, description="Pods.")
    mode: _Mode = Field(default=_Mode.SAFE, description="How to run.")
    inner: _Inner = Field(default_factory=_Inner, description="Nested settings.")
    ports: list[_Port] = Field(default_factory=list, max_length=4, description="Ports to open.")
    labels: dict[str, str] | None = Field(default=None, description="Extra labels.")
    by_name: dict[str, _Inner] = Field(default_factory=dict, description="Settings per name.")


def _rows() -> dict[str, FieldRow]:
    return {row.path: row for row in field_rows(model_schema(_Example), "spec")}


@pytest.mark.parametrize(
    ("path", "type_", "required", "default", "bounds", "description"),
    [
        ("spec.replicas", "integer", False, "`1`", "≥ 0; ≤ 100", "Pods."),
        ("spec.mode", "string", False, '`"Safe"`', 'one of `"Fast"`, `"Safe"`', "How to run."),
        ("spec.inner", "object", False, "`{}`", "", "Nested settings."),
        ("spec.inner.ratio", "number", False, "`0.5`", "> 0; ≤ 1", "A share of &lt;something&gt;."),
        ("spec.ports", "[]object", False, "`[]`", "items ≤ 4", "Ports to open."),
        ("spec.ports[].name", "string", True, "", "length ≤ 15; pattern `^[a-z]+$`", "Port name \\| label."),
        ("spec.ports[].number", "integer", True, "", "≥ 1; ≤ 65535", "Port number."),
        ("spec.labels", "map[string]string", False, "", "", "Extra labels."),
        ("spec.byName", "map[string]object", False, "`{}`", "", "Settings per name."),
        ("spec.byName.<key>.ratio", "number", False, "`0.5`", "> 0; ≤ 1", "A share of &lt;something&gt;."),
    ],
)
def test_field_rows(path: str, type_: str, required: bool, default: str, bounds: str, description: str) -> None:
    row = _rows()[path]
    assert (row.type, row.required, row.default, row.bounds, row.description) == (
        type_,
        required,
        default,
        bounds,
        description,
    )


def test_rows_follow_the_schema_order_depth_first() -> None:
    assert list(_rows()) == [
        "spec.replicas",
        "spec.mode",
        "spec.inner",
        "spec.inner.ratio",
        "spec.ports",
        "spec.ports[].name",
        "spec.ports[].number",
        "spec.labels",
        "spec.byName",
        "spec.byName.<key>.ratio",
    ]


def test_pattern_pipes_are_escaped_for_tables() -> None:
    row = {
        r.path: r
        for r in field_rows(
            gem_crds()["gem.dev_gemtrainings.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
                "spec"
            ],
            "spec",
        )
    }["spec.checkpoint.uri"]
    assert row.bounds.endswith(r"pattern `^(s3\|gs\|https?\|file)://.+\|^/.+`")
    assert row.required


def test_rules_name_the_object_they_sit_on() -> None:
    crd = gem_crds()["gem.dev_gemtrainings.yaml"]
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = {(r.path, r.rule) for r in rule_rows(root, "")}
    assert ("(resource)", "self.metadata.name.size() <= 40") in rules
    assert ("spec.topology", "!(has(self.tiers) && has(self.kueueTopology))") in rules


def test_every_field_of_every_kind_is_documented() -> None:
    """Each spec and status field of the three CRDs has a row in the page, under its kind."""
    page = api_reference()
    for crd in gem_crds().values():
        kind = crd["spec"]["names"]["kind"]
        section = page.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0]
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for part in ("spec", "status"):
            rows = field_rows(schema["properties"][part], part)
            assert rows, (kind, part)
            for row in rows:
                assert f"| `{row.path}` |" in section, (kind, row.path)


def test_render_is_deterministic_and_ordered() -> None:
    crds = list(gem_crds().values())
    page = render_reference(crds)
    assert page == render_reference(crds)
    kinds = [c["spec"]["names"]["kind"] for c in crds]
    assert [page.index(f"\n## {k}\n") for k in kinds] == sorted(page.index(f"\n## {k}\n") for k in kinds)


def test_docs_page_matches_the_models() -> None:
    """Fails when the models change without `gemop crds` (or when the page is edited by hand)."""
    path = ROOT / "docs" / "api-reference.md"
    assert path.exists(), f"{path} missing: run `gemop crds`"
    assert path.read_text(encoding="utf-8") == api_reference(), f"{path} drifted from the models: run `gemop crds`"


def test_crds_check_detects_reference_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds", "--out", str(tmp_path)]) == 0
    page = tmp_path / "api-reference.md"
    assert page.read_text(encoding="utf-8") == api_reference()
    assert main(["crds", "--out", str(tmp_path), "--check"]) == 0
    page.write_text(page.read_text(encoding="utf-8").replace("Pipeline stages.", "Stages.", 1), encoding="utf-8")
    capsys.readouterr()
    assert main(["crds", "--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "drifted from gem_operator/api; run `gemop crds`" in err
    assert str(page) in err
    assert "gem.dev_gemtrainings.yaml" not in err


def test_quantities_read_as_int_or_string() -> None:
    spec = gem_crds()["gem.dev_rankingservices.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rows = {r.path: r for r in field_rows(spec["properties"]["spec"], "spec")}
    assert rows["spec.workload.podTemplate.spec.containers[].resources.limits"].type == "map[string]int-or-string"
