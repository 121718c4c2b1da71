"""Generated CRDs: in sync with the models, structural, and judging samples as an API server would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_operator.api import KINDS, InvalidSpec, kind_info, parse_spec
from gem_operator.api.crd import all_crds, build_crd, render_yaml
from gem_operator.api.schema_check import apply_defaults, schema_errors, validate_manifest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "crds" / "samples").glob("**/*.yaml"))  # overlays/ too
INVALID = sorted((Path(__file__).parent / "invalid").glob("*.yaml"))


def test_crd_files_match_the_models() -> None:
    """Fails when someone edits the models without running `gemop crds` (or edits the YAML by hand)."""
    for filename, crd in all_crds().items():
        path = ROOT / "crds" / filename
        assert path.exists(), f"{path} missing: run `gemop crds`"
        assert path.read_text() == render_yaml(crd), f"{path} drifted from the models: run `gemop crds`"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.items():
            out.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_walk(value, f"{path}[{i}]"))
    return out


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
def test_schema_is_structural(info: Any) -> None:
    version = build_crd(info)["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "allOf" not in node, path
        assert "title" not in node, path
        if "properties" in node:
            assert node.get("type") == "object", path
            assert "additionalProperties" not in node, path
    spec = schema["properties"]["spec"]
    leaves = [n for p, n in _walk(spec) if n.get("type") not in (None, "object") and not p.endswith(".items")]
    assert leaves and all("description" in n for n in leaves)


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
def test_crd_surface(info: Any) -> None:
    crd = build_crd(info)
    names = crd["spec"]["names"]
    assert names["shortNames"] == list(info.short_names)
    assert names["categories"] == ["gem"]
    version = crd["spec"]["versions"][0]
    assert "status" in version["subresources"]
    assert ("scale" in version["subresources"]) == info.scalable
    assert any(c["name"] == "Phase" for c in version["additionalPrinterColumns"])


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
def test_every_printer_column_reads_a_field_of_the_schema(info: Any) -> None:
    """A column whose path names no field prints <none> in every row, and kubectl says nothing: each
    path under .spec or .status (up to a filter, as the Ready condition's) names a property."""
    version = build_crd(info)["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"].split("[")[0].strip(".").split(".")
        if path[0] == "metadata":
            continue
        node = schema
        for name in path:
            node = node.get("items", node)  # a list is read through its items
            assert name in node.get("properties", {}), f"{column['name']}: {column['jsonPath']} names no field"
            node = node["properties"][name]


def test_the_learned_sm_target_and_p99_are_in_the_wide_listing() -> None:
    columns = {
        c["name"]: c for c in build_crd(kind_info("RankingService"))["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert columns["SM-Target"]["jsonPath"] == ".status.autoscaling.effectiveTargetSmActive"
    assert columns["P99-ms"]["jsonPath"] == ".status.autoscaling.p99LatencyMs"
    assert columns["SM-Target"]["priority"] == columns["P99-ms"]["priority"] == 1  # -o wide, as Model-Load-s


def test_scale_subresource_on_pools_only() -> None:
    scalable = {i.kind for i in KINDS if "scale" in build_crd(i)["spec"]["versions"][0]["subresources"]}
    assert scalable == {"RankingService", "SolarisPrecompute"}


def test_nested_defaults_are_applied_like_the_api_server() -> None:
    schema = build_crd(kind_info("rks"))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    value = apply_defaults(schema, {"spec": {"model": {"uri": "s3://m"}}})
    assert value["spec"]["autoscaling"]["stabilizationSeconds"] == {"up": 0, "down": 300}
    assert value["spec"]["autoscaling"]["policies"]["scaleUp"][0] == {"percent": 100, "periodSeconds": 15}


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_are_valid(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert validate_manifest(doc) == []


def _expectations(path: Path) -> tuple[str | None, str]:
    schema = handler = None
    for line in path.read_text().splitlines():
        if line.startswith("# schema:"):
            text = line.removeprefix("# schema:").strip()
            schema = None if text.startswith("(accepted") else text
        if line.startswith("# handler:"):
            handler = line.removeprefix("# handler:").strip()
    assert handler, f"{path} needs a '# handler:' line"
    return schema, handler


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_bad_samples_are_rejected_with_the_field_named(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    info = kind_info(doc["kind"])
    want_schema, want_handler = _expectations(path)
    errors = schema_errors(info, doc)
    if want_schema is None:
        assert errors == [], "the schema should leave this to the operator"
    else:
        assert any(want_schema in e for e in errors), errors
    with pytest.raises(InvalidSpec) as err:
        parse_spec(info, doc)
    assert any(want_handler in p for p in err.value.problems), err.value.problems
    assert validate_manifest(doc), "gemop validate must reject it too"
