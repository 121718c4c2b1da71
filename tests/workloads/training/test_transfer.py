"""Knowledge transfer pieces: time split, historical memory, KD loss, coverage simulation, vertical model,
foundation pass, model roles and the transfer evaluation (tiny sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.data.blocks import cap_schema, collate  # noqa: E402
from gem_workloads.data.catalog import load_dataset  # noqa: E402
from gem_workloads.data.timeline import SyntheticTimeline, TimelineConfig, history_slices, time_split  # noqa: E402
from gem_workloads.models import build_model, get_preset  # noqa: E402
from gem_workloads.models.kunlun import KunlunModel  # noqa: E402
from gem_workloads.models.model_dir import ModelDirError, load_model_dir, save_model_dir  # noqa: E402
from gem_workloads.models.vertical import TIER_INDEX, TransferInputs, VerticalModel  # noqa: E402
from gem_workloads.training.coverage import (  # noqa: E402
    EXACT,
    GROUP,
    NONE,
    SIMILAR,
    TierSources,
    assign_tiers,
    tier_embeddings,
    tier_sources,
)
from gem_workloads.training.distill import ExampleFeed, FitConfig, fit, kd_loss  # noqa: E402
from gem_workloads.training.foundation_pass import FoundationPass, run_pass  # noqa: E402
from gem_workloads.training.foundation_pass import main as pass_main  # noqa: E402
from gem_workloads.training.memory import HistoricalMemory  # noqa: E402
from gem_workloads.transfer.__main__ import main as transfer_main  # noqa: E402
from gem_workloads.transfer.__main__ import table  # noqa: E402
from gem_workloads.transfer.experiment import EvalConfig, run  # noqa: E402

pytestmark = pytest.mark.workloads

TINY_DATA = TimelineConfig(num_users=120, num_items=200, organic_per_user=12, impressions_per_user=8)


@pytest.fixture(scope="module")
def data() -> SyntheticTimeline:
    torch.set_num_threads(1)
    return SyntheticTimeline(TINY_DATA)


@pytest.fixture(scope="module")
def foundation(data: SyntheticTimeline) -> KunlunModel:
    torch.manual_seed(0)
    model = build_model("kunlun", get_preset("tiny"), cap_schema(data.schema, 2000))
    assert isinstance(model, KunlunModel)
    model.eval()
    return model


@pytest.fixture(scope="module")
def fpass(data: SyntheticTimeline, foundation: KunlunModel) -> FoundationPass:
    return run_pass(foundation, data, data.examples, "f-1", batch_size=256)


def test_time_split_and_histories_hold_only_the_past(data: SyntheticTimeline) -> None:
    split = time_split(data, 0.25)
    assert data.ev_time[split.train].max() < split.cut <= data.ev_time[split.eval].min()
    assert len(split.train) + len(split.eval) == len(data.examples)
    rows = split.eval
    idx, lengths = history_slices(rows, data.user_start, data.ev_user, 64)
    owner = np.repeat(rows, lengths)
    assert (data.ev_user[idx] == data.ev_user[owner]).all()
    assert (data.ev_time[idx] < data.ev_time[owner]).all()
    # A long history reaches back to the organic views before the first impression.
    assert lengths.min() >= TINY_DATA.organic_per_user // 2


def test_memory_never_returns_a_representation_from_the_example_time_or_later() -> None:
    rng = np.random.default_rng(0)
    user = rng.integers(0, 5, 300)
    when = rng.integers(0, 40, 300).astype(np.float64)  # many ties
    mem = HistoricalMemory(user, when, np.arange(300))
    qu, qt = rng.integers(0, 6, 200), rng.integers(0, 45, 200).astype(np.float64)
    ref, present = mem.query(qu, qt, 5)
    for i in range(200):
        earlier = np.flatnonzero((user == qu[i]) & (when < qt[i]))
        expect = earlier[np.lexsort((earlier, when[earlier]))][-5:] if len(earlier) else earlier
        got = ref[i][present[i]]
        assert sorted(got.tolist()) == sorted(expect.tolist())
        assert (when[got] < qt[i]).all() and (user[got] == qu[i]).all()
        assert (np.diff(when[got]) >= 0).all()  # most recent last
        assert not present[i][: 5 - len(got)].any()  # right-aligned


def test_kd_weight_zero_equals_hard_label_training(data: SyntheticTimeline, fpass: FoundationPass) -> None:
    schema = cap_schema(data.schema, 2000)
    rows = time_split(data).train[:300]
    params = []
    for teacher in (None, fpass):
        torch.manual_seed(0)
        model = build_model("vertical", get_preset("tiny"), schema)
        fit(model, ExampleFeed(data, rows, schema, 4, teacher), FitConfig(epochs=1, batch_size=64, kd_weight=0.0))
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(params[0], params[1])
    logits, labels, mask = torch.full((3, 2), 1.5), torch.ones(3, 2), torch.ones(3, 2)
    soft = torch.full((3, 2), 0.2)
    assert kd_loss(logits, labels, mask, soft, 0.0) == kd_loss(logits, labels, mask, None, 0.0)
    assert kd_loss(logits, labels, mask, soft, 1.0) != kd_loss(logits, labels, mask, None, 0.0)


def test_coverage_simulation_substitutes_the_fallback_the_store_would_give() -> None:
    #            user time item group bucket
    rows = [(0, 0.1, 5, 1, 0), (0, 0.2, 6, 1, 0), (0, 0.3, 7, 1, 0), (1, 0.4, 7, 1, 0), (1, 0.05, 9, 2, 3)]
    user, when, item, group, bucket = (np.array(c) for c in zip(*rows, strict=True))
    src = tier_sources(user, when.astype(float), item, group, bucket, group_keep=4)
    assert sorted(src.group[2][src.group[2] >= 0].tolist()) == [0, 1]  # user 0's earlier ads of group 1
    assert src.similar[3] == 2  # same bucket, same ad 7, earlier (user 0)
    assert (src.group[0] < 0).all() and src.similar[0] == -1
    rng = np.random.default_rng(0)
    assert (assign_tiers(src, 1.0, 0.0, rng) == EXACT).all()
    assert (assign_tiers(src, 0.0, 0.0, rng) == NONE).all()  # drop
    tiers = assign_tiers(src, 0.0, 1.0, rng)
    assert tiers.tolist() == [NONE, GROUP, GROUP, SIMILAR, NONE]  # user 1 has no earlier ad of group 1
    table = np.arange(10, dtype=np.float32).reshape(5, 2)
    emb = tier_embeddings(table, src, tiers)
    np.testing.assert_allclose(emb[2], table[[0, 1]].mean(0))
    np.testing.assert_allclose(emb[3], table[2])
    assert not emb[0].any() and not emb[4].any()
    with pytest.raises(ValueError, match="exact_rate"):
        assign_tiers(TierSources(src.exact, src.group, src.similar), 1.5, 0.0, rng)


def test_vertical_model_takes_memory_and_tiers(data: SyntheticTimeline) -> None:
    schema = cap_schema(data.schema, 2000)
    cfg = get_preset("tiny").with_(memory_len=3, memory_width=8, solaris_width=6)
    torch.manual_seed(0)
    model = build_model("vertical", cfg, schema)
    assert isinstance(model, VerticalModel) and model.takes_memory and model.takes_solaris
    model.eval()
    batch = collate(data.block(data.examples[:5], 4), schema)
    emb = torch.randn(5, 6)
    with torch.no_grad():
        none = model.score(batch.user, batch.candidate, TransferInputs())
        exact = model.score(
            batch.user, batch.candidate, TransferInputs(solaris=emb, tier=torch.zeros(5, dtype=torch.long))
        )
        other = TransferInputs(solaris=emb * 0 + 7, tier=torch.full((5,), TIER_INDEX["none"]))
        none_again = model.score(batch.user, batch.candidate, other)  # "none" ignores the vector
    assert not torch.allclose(none, exact)
    torch.testing.assert_close(none, none_again)
    with pytest.raises(ValueError, match="memory holds 2"):
        model.score(
            batch.user, batch.candidate, TransferInputs(torch.zeros(5, 2, 8), torch.ones(5, 2, dtype=torch.bool))
        )


def test_foundation_pass_writes_soft_labels_loopfm_and_embeddings_in_one_pass(
    tmp_path: Path, data: SyntheticTimeline, foundation: KunlunModel, fpass: FoundationPass
) -> None:
    n = len(data.examples)
    assert fpass.soft.shape == (n, foundation.schema.num_tasks) and ((fpass.soft > 0) & (fpass.soft < 1)).all()
    assert fpass.loopfm.shape == (n, 2 * foundation.config.embedding_dim)
    assert fpass.solaris.shape == (n, foundation.embedding_size)
    model_dir = save_model_dir(tmp_path / "f", foundation, "kunlun", foundation.config, foundation.schema, "f-7")
    assert load_model_dir(model_dir).role == "foundation"
    # The job on the CLI (the synthetic default size would take long: point it at a vertical model first).
    vertical = build_model("vertical", get_preset("tiny"), foundation.schema)
    vdir = save_model_dir(tmp_path / "v", vertical, "vertical", get_preset("tiny"), foundation.schema, "v-1",
                          foundation_version="f-7")  # fmt: skip
    loaded = load_model_dir(vdir)
    assert (loaded.role, loaded.foundation_version) == ("vertical", "f-7")
    assert pass_main(["--model", str(vdir), "--output", str(tmp_path / "out")]) == 2
    out = fpass.save(tmp_path / "pass", {"data": "synthetic"})
    again = FoundationPass.load(out)
    np.testing.assert_array_equal(again.loopfm, fpass.loopfm)
    assert json.loads((out / "pass.json").read_text())["loopfmWidth"] == fpass.loopfm.shape[1]
    with pytest.raises(ValueError, match="not a foundation pass"):
        FoundationPass.load(tmp_path / "v")


def test_bad_inputs_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="memory_len and memory_width"):
        get_preset("tiny").with_(memory_len=4)
    with pytest.raises(ValueError, match="kd_weight"):
        FitConfig(kd_weight=1.5)
    with pytest.raises(ValueError, match="eval_fraction"):
        time_split(SyntheticTimeline(TimelineConfig(num_users=10)), 0.0)
    with pytest.raises(ValueError, match="--data"):
        load_dataset("imagenet")
    with pytest.raises(ValueError, match="one entry each"):
        HistoricalMemory(np.zeros(2, np.int64), np.zeros(3), np.zeros(2, np.int64))
    schema = cap_schema(SyntheticTimeline(TimelineConfig(num_users=10)).schema, 100)
    model = build_model("dlrm", get_preset("tiny"), schema)
    with pytest.raises(ValueError, match="role"):
        save_model_dir(tmp_path, model, "dlrm", get_preset("tiny"), schema, "v", role="teacher")
    meta = save_model_dir(tmp_path, model, "dlrm", get_preset("tiny"), schema, "v") / "gem-model.json"
    raw = json.loads(meta.read_text())
    assert raw["role"] == "vertical"
    meta.write_text(json.dumps({**raw, "role": "teacher"}))
    with pytest.raises(ModelDirError, match="role 'teacher'"):
        load_model_dir(tmp_path)
    assert transfer_main(["eval", "--kd-weight", "2"]) == 2
    assert transfer_main(["eval", "--memory-len", "0"]) == 2


@pytest.mark.slow
def test_transfer_eval_end_to_end_on_tiny_sizes() -> None:
    cfg = EvalConfig(
        foundation_preset="tiny",
        vertical_preset="tiny",
        foundation_epochs=1,
        vertical_epochs=1,
        memory_len=4,
        synthetic=TINY_DATA,
        vertical_overrides={"seq_len": 4, "block_size": 4},
    )
    result = run(cfg)
    names = {"alone", "kd", "kd+loopfm", "kd+loopfm+solaris@100%", "kd+loopfm+solaris@40%",
             "kd+loopfm+solaris@40%-drop", "kd+loopfm+solaris@0%-drop"}  # fmt: skip
    assert names <= set(result["variants"])
    tasks = {"ctr_feed", "ctr_search", "ctr_video", "cvr"}
    assert set(result["foundation"]) <= tasks and result["foundation"]
    for aucs in result["variants"].values():
        assert all(0.0 <= v <= 1.0 for v in aucs.values())
    shares = result["tier_shares"]
    assert shares["kd+loopfm+solaris@100%"]["exact"] == 1.0
    assert shares["kd+loopfm+solaris@0%-drop"]["none"] == 1.0
    assert shares["kd+loopfm+solaris@40%"]["exact"] == shares["kd+loopfm+solaris@40%-drop"]["exact"]
    assert isinstance(result["loopfm_transfer_ratio"], float)
    text = table(result)
    assert "LoopFM transfer ratio" in text and "kd+loopfm+solaris@70%-drop" in text
    json.dumps(result)


def test_vertical_training_cli_records_its_foundation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gem_workloads.training.vertical import main as vertical_main

    data = load_dataset("synthetic", 0, TimelineConfig(num_users=60))
    torch.manual_seed(0)
    teacher = build_model("kunlun", get_preset("tiny"), cap_schema(data.schema, 2000))
    t_dir = save_model_dir(tmp_path / "t", teacher, "kunlun", get_preset("tiny"), teacher.schema, "found-3")
    out = tmp_path / "v"
    common = ["--users", "60", "--epochs", "1", "--output", str(out)]
    assert (
        vertical_main(["--teacher", str(t_dir), "--kd-weight", "0.3", "--memory-len", "4", "--solaris", *common]) == 0
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    loaded = load_model_dir(out)
    assert (
        (loaded.role, loaded.foundation_version)
        == ("vertical", "found-3")
        == ("vertical", printed["foundationVersion"])
    )
    assert (loaded.config.memory_len, loaded.config.solaris_width) == (4, teacher.embedding_size)
    assert (out / "teacher-pass" / "pass.json").exists()
    # The pass is reusable; a vertical model is no teacher; KD weights outside [0, 1] are refused.
    again = ["--teacher", str(t_dir), "--teacher-pass", str(out / "teacher-pass"), *common[:-1], str(tmp_path / "v2")]
    assert vertical_main(again) == 0
    assert vertical_main(["--teacher", str(out), *common]) == 2
    assert vertical_main(["--teacher", str(t_dir), "--kd-weight", "2", *common]) == 2
