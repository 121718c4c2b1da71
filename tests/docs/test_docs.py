"""The README and docs/: short README, links that resolve, examples the API accepts, commands that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gem_operator.api.schema_check import validate_manifest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _links(text: str) -> list[str]:
    """Link targets outside code blocks and code spans (where brackets are code, not links)."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return _LINK.findall(prose)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = _CODE_SPAN.sub(lambda m: m.group(0)[1:-1], heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def _yaml_blocks(text: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; keep it under {README_MAX_LINES}, move detail to docs/"
    )


def test_readme_keeps_exactly_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Two commands\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["bash scripts/dev.sh demo", "bash scripts/dev.sh test"]


def test_readme_names_the_install_routes() -> None:
    text = README.read_text(encoding="utf-8")
    for needle in (
        "helm install gem-operator charts/gem-operator",
        "pip install gem-operator ",
        "pip install 'gem-operator[workloads]'",
        "pip install 'gem-operator[dev]'",
        "pip install 'gem-operator[testbed]'",
        "testbed/gem_testbed/",
    ):
        assert needle in text, needle


def test_readme_keeps_the_trace_attribution() -> None:
    text = README.read_text(encoding="utf-8")
    for needle in ("CC-BY 4.0", "Splitwise", "(data/traces/README.md)"):
        assert needle in text, needle
    assert "Keep this attribution" in (ROOT / "data" / "traces" / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _links(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n[ok](#top) [gone](missing.md) `[code](not-a-link)`\n", encoding="utf-8")
    assert _links(page.read_text(encoding="utf-8")) == ["#top", "missing.md"]
    assert _anchors(page) == {"top"}
    assert _slug("Closed loop (`gemop loadtest`)") == "closed-loop-gemop-loadtest"


def test_readme_examples_are_valid_resources() -> None:
    """The tour's YAML passes the CRD schema, its CEL rules and the operator's own checks."""
    blocks = _yaml_blocks(README.read_text(encoding="utf-8"))
    kinds = []
    for block in blocks:
        obj = yaml.safe_load(block)
        assert validate_manifest(obj) == [], obj["kind"]
        kinds.append(obj["kind"])
    assert sorted(kinds) == ["GEMTraining", "RankingService", "SolarisPrecompute"]


def test_every_benchmark_names_a_command_that_exists() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 10
    for section in sections:
        title = section.splitlines()[0]
        scripts = re.findall(r"`(?:python|pytest) ((?:bench|tests)/[\w/]+\.py)", section)
        assert scripts, f"{title}: no command that measures it"
        for script in scripts:
            assert (ROOT / script).is_file(), f"{title}: {script} does not exist"
