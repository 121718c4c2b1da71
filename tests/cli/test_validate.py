"""`gemop validate`: files, directories, Lists, multi-document files and stdin; each file on its own."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from gem_operator.cli import main
from gem_operator.cli.validate import run_validate
from gem_testbed.faults.malformed import CASES, sample


def write(path: Path, *docs: object) -> Path:
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


def bad(name: str) -> dict[str, object]:
    return next(c for c in CASES if c.name == name).manifest()


def test_a_directory_of_lists_and_multi_document_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "apps").mkdir()
    write(tmp_path / "apps" / "multi.yaml", sample("RankingService"), {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "cm"}}, sample("SolarisPrecompute"))  # fmt: skip
    write(
        tmp_path / "list.yml",
        {"apiVersion": "v1", "kind": "List", "items": [sample("GEMTraining"), bad("gem-pp-true")]},
    )
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert main(["validate", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "multi.yaml: RankingService/ads-ranker: valid" in out
    assert "multi.yaml: SolarisPrecompute/ads-precompute: valid" in out
    assert "document 2: ConfigMap/cm (v1) is not a gem.dev kind: skipped" in out
    assert "list.yml: GEMTraining/gem-pretrain: valid" in out
    assert "list.yml: GEMTraining/bad-0: spec.parallelism.pp" in err
    assert "notes.txt" not in out + err


def test_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    text = yaml.safe_dump_all([sample("GEMTraining"), bad("gem-suspend-yes")])
    assert run_validate(["-"], stdin=io.StringIO(text)) == 1
    out, err = capsys.readouterr()
    assert "<stdin>: GEMTraining/gem-pretrain: valid" in out
    assert "<stdin>: GEMTraining/bad-0: spec.suspend" in err


def test_every_error_of_a_file_and_every_file_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two = bad("ran-port-str")
    two["spec"]["gpusPerReplica"] = "1"
    deep_text = "spec:\n" + "".join("  " * (i + 1) + "x:\n" for i in range(900)) + "  " * 901 + "y: 1\n"
    (tmp_path / "a-deep.yaml").write_text("apiVersion: gem.dev/v1alpha1\nkind: GEMTraining\n" + deep_text)
    (tmp_path / "b-flow.yaml").write_text("[" * 5000 + "]" * 5000)
    write(tmp_path / "c.yaml", two, bad("gem-image-1mb"))
    write(tmp_path / "d-good.yaml", sample("RankingService"))
    assert main(["validate", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "a-deep.yaml: nested more than" in err and "b-flow.yaml: nested more than" in err
    assert "c.yaml: RankingService/bad-0: spec.port" in err
    assert "c.yaml: RankingService/bad-0: spec.gpusPerReplica" in err
    assert "c.yaml: GEMTraining/bad-0: spec.workload.image" in err and len(err) < 20_000
    assert "d-good.yaml: RankingService/ads-ranker: valid" in out


def test_api_version_and_kind_of_our_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = dict(sample("GEMTraining"), apiVersion="gem.dev/v1beta9")
    typo = dict(sample("GEMTraining"), kind="GEMTrainig")
    assert main(["validate", str(write(tmp_path / "x.yaml", old, typo))]) == 1
    err = capsys.readouterr().err
    assert (
        "GEMTraining/gem-pretrain: apiVersion: gem.dev/v1beta9 is not served for GEMTraining; use gem.dev/v1alpha1"
        in err
    )
    assert "GEMTrainig/gem-pretrain: kind: GEMTrainig is not a kind of gem.dev" in err


def test_metadata_and_huge_numbers_are_errors_not_cel_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name that is not a string, a missing name and an integer past int64 each reached the CEL
    rules, whose evaluation raised (a traceback out of `gemop validate`)."""
    numeric = dict(sample("RankingService"), metadata={"name": 7})
    nameless = dict(sample("SolarisPrecompute"), metadata={"namespace": "default"})
    huge = sample("RankingService")
    huge["metadata"] = {"name": "huge"}
    # where the schema keeps unknown fields the API server stores it as a float: the rules still run
    huge["spec"]["workload"] = {"podTemplate": {"spec": {"securityContext": {"runAsUser": 10**30}}}}
    past_float = sample("GEMTraining")
    past_float["metadata"] = {"name": "past-float"}
    past_float["spec"]["workload"] = {"podTemplate": {"spec": {"securityContext": {"runAsUser": 10**400}}}}
    write(tmp_path / "m.yaml", numeric, nameless, huge, past_float)
    assert main(["validate", str(tmp_path / "m.yaml")]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert "RankingService/7: metadata.name: expected a string, got a int (7)" in err
    assert "SolarisPrecompute/?: metadata.name: missing; every object needs a name" in err
    assert "RankingService/huge: valid" in out
    assert "GEMTraining/past-float:" in err and "cannot be evaluated here" in err
