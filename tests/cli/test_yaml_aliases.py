"""YAML aliases that expand to billions of values: every file reader refuses them at once.

Each of these commands used to walk the expanded document (validation, json.dumps) and never end.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from gem_common import yamldocs
from gem_operator.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "crds" / "samples"
TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"

LAUGHS = "\n".join(
    ["apiVersion: gem.dev/v1alpha1", "kind: RankingService", "metadata: {name: lol}", "spec:", '  l0: &l0 ["lol"]']
    + [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
)


@pytest.fixture
def laughs(tmp_path: Path) -> Path:
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS + "\n")
    return path


def test_expansion_is_counted_without_expanding() -> None:
    load = yamldocs.load_documents
    started = time.perf_counter()
    with pytest.raises(yamldocs.AliasExpansionError, match="expand to more than 5,000,000 values"):
        load(LAUGHS)
    assert time.perf_counter() - started < 5  # linear in what the file holds, not in what it means
    # Anchors as people use them: a block of defaults reused.
    used = "defaults: &d {cpu: 1, memory: 1Gi}\na: *d\nb: {<<: *d, cpu: 2}\nc: [*d, *d]\n"
    assert load(used) == list(yaml.safe_load_all(used))
    with pytest.raises(yamldocs.AliasExpansionError, match="a loop"):
        load("a: &a [1, *a]\n")
    assert load("") == [] and load("---\n---\nx: 1\n") == [None, {"x": 1}]


def test_budget_is_shared_by_the_documents_of_a_file() -> None:
    one = "a: &a [" + ", ".join(["1"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 1000) + "]\n"  # ~10^6 each
    assert yamldocs.expanded_values(yaml.safe_load(one)) > 1_000_000
    yamldocs.load_documents(one)
    with pytest.raises(yamldocs.AliasExpansionError):
        yamldocs.load_documents("\n---\n".join([one] * 5))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["validate", "{f}"], "cannot parse: its aliases expand"),
        (["plan", "{f}"], "JOB {f}: not valid YAML: its aliases expand"),
        (["plan", str(SAMPLES / "gemtraining.yaml"), "--nodes", "{f}"], "--nodes {f}: not valid YAML"),
        (["plan", str(SAMPLES / "gemtraining.yaml"), "--fleet", "{f}"], "--fleet {f}: not valid YAML"),
        (["replay", "--trace", str(TRACE), "--service", "{f}"], "{f}: invalid YAML: its aliases expand"),
    ],
)
def test_gemop_refuses_an_alias_bomb_at_once(
    laughs: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    assert main([a.replace("{f}", str(laughs)) for a in args]) in (1, 2)
    err = capsys.readouterr().err
    assert needle.replace("{f}", str(laughs)) in err and "Traceback" not in err, err
