"""The holdout of a data-spec run: the sources' later data, read once (never wrapped around), as requests."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.data.ads_log import AdsLogConfig, write_ads_log
from gem_workloads.data.spec import parse_data_spec
from gem_workloads.models import get_preset
from gem_workloads.training.holdout import build_holdout, holdout_spec, request_lines

pytestmark = [pytest.mark.workloads]
SMALL = AdsLogConfig(
    users=50, ads=20, impressions=700, purchases=120, posts=120, files_per_source=1, row_group_rows=128
)


def test_holdout_reads_every_later_example_once_and_names_missing_sources(tmp_path: Path) -> None:
    spec = parse_data_spec(write_ads_log(tmp_path / "log", SMALL))
    later = {s.name: s.uri for s in spec.sources}  # the same files stand in for the later data here
    with pytest.raises(ValueError, match=r"missing \['video'\]"):
        holdout_spec(spec, {k: v for k, v in later.items() if k != "video"})
    with pytest.raises(ValueError, match=r"unknown \['ghost'\]"):
        holdout_spec(spec, {**later, "ghost": "/nowhere"})
    cfg = get_preset("tiny")
    holdout = build_holdout("spec", cfg, 0, 10_000, holdout_spec(spec, later))
    assert holdout.size == SMALL.impressions  # one pass: a limit beyond the data never repeats an example
    assert holdout.recipe["data"] == "spec" and holdout.recipe["limit"] == 10_000
    capped = build_holdout("spec", cfg, 0, 300, holdout_spec(spec, later))
    assert capped.size == 300
    from gem_workloads.data.stream_loader import StreamLoader

    schema = StreamLoader(spec, 8, cfg.seq_len, cfg.max_table_rows).schema
    lines = list(request_lines(capped, schema))
    assert len(lines) == 300
    body = lines[0]["body"]
    assert set(body["user"]["sequence"]) == {f.name for f in schema.sequence_features}
    assert set(lines[0]["labels"]) <= {"ctr", "cvr"} and "ctr" in lines[0]["labels"]
