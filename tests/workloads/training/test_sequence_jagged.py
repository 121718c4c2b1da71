"""Packed (jagged) sequences: the same function as the right-padded layout, without its FLOPs."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from gem_workloads.data import MixingLoader, SyntheticConfig, SyntheticUniverse, cap_schema  # noqa: E402
from gem_workloads.models import build_model, get_preset  # noqa: E402
from gem_workloads.models.features import Batch  # noqa: E402
from gem_workloads.models.sequence import PackedSequence, pack_jagged  # noqa: E402
from gem_workloads.training.trainer import masked_bce  # noqa: E402

pytestmark = pytest.mark.workloads


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _batch(preset: str, n: int, history: int) -> tuple[Batch, object]:
    """``history``: the longest history the data draws (above ``seq_len`` exercises truncation)."""
    cfg = get_preset(preset)
    universe = SyntheticUniverse(SyntheticConfig(seq_len=history, seed=1))
    schema = cap_schema(universe.schema, cfg.max_table_rows)
    loader = MixingLoader([universe.domain(i) for i in range(3)], [1, 1, 1], n, seed=1, schema=schema)
    return loader.batch(0), schema


def _loss_and_grads(model: Any, batch: Batch) -> tuple[Any, Any, dict[str, Any]]:
    model.zero_grad(set_to_none=True)
    logits = model(batch)
    loss = masked_bce(logits, batch.labels, batch.label_mask)
    torch.autograd.backward(loss)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), loss.detach(), grads


@pytest.mark.parametrize(("preset", "history_factor"), [("tiny", 1), ("tiny", 2), ("small", 1)])
def test_packed_equals_padded_outputs_loss_and_gradients(preset: str, history_factor: int) -> None:
    cfg = get_preset(preset)
    batch, schema = _batch(preset, 24, cfg.seq_len * history_factor)
    lengths = batch.user.sequence.lengths()
    assert int((lengths == 0).sum()) > 0  # empty histories are covered (only the null key)
    if history_factor > 1:
        assert int((lengths > cfg.seq_len).sum()) > 0  # truncated histories are covered
    torch.manual_seed(0)
    model = build_model("kunlun", cfg, schema)  # type: ignore[arg-type]
    logits, loss, grads = _loss_and_grads(model, batch)
    model.padded_sequence = True  # type: ignore[union-attr]
    ref_logits, ref_loss, ref_grads = _loss_and_grads(model, batch)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
    assert float(loss) == pytest.approx(float(ref_loss), abs=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name, g in grads.items():
        scale = float(ref_grads[name].abs().max()) + 1e-8
        assert float((g - ref_grads[name]).abs().max()) / scale < 1e-4, name


def test_packed_sequence_flops_are_at_least_40_percent_below_padded() -> None:
    """At the synthetic data's length distribution (uniform over 0..seq_len)."""
    cfg = get_preset("small").with_(num_layers=2)
    batch, schema = _batch("small", 64, cfg.seq_len)
    torch.manual_seed(0)
    model = build_model("kunlun", cfg, schema)  # type: ignore[arg-type]
    flops = {}
    for padded in (False, True):
        model.padded_sequence = padded  # type: ignore[union-attr]
        with FlopCounterMode(display=False) as counter:
            torch.autograd.backward(model.encode_user(batch.user).summaries.sum())  # type: ignore[union-attr]
        flops[padded] = counter.get_total_flops()
    assert flops[False] <= 0.6 * flops[True], flops


def test_packed_block_attention_stays_inside_blocks() -> None:
    from gem_workloads.models.kunlun import BlockAttentionLayer

    torch.manual_seed(0)
    layer = BlockAttentionLayer(8, 2, block_size=4, ffn_mult=2)
    seq = PackedSequence.build(torch.tensor([6, 3]), max_len=8, block_size=4)
    assert seq.num_blocks == 3 and seq.num_tokens == 9
    h = torch.randn(9, 8, requires_grad=True)
    out = layer(h, seq)
    out[1].sum().backward()  # user 0, event 1: block 0 (events 0..3)
    assert h.grad is not None
    assert h.grad[4:].abs().sum() == 0  # user 0's second block and user 1 never influence it
    assert h.grad[:4].abs().sum() > 0


def test_layout_round_trips_and_windows() -> None:
    lengths = torch.tensor([5, 0, 9, 2])
    values = torch.arange(16.0)[:, None]
    kept, seq = pack_jagged(values, lengths, max_len=8, block_size=4)
    assert seq.lengths.tolist() == [5, 0, 8, 2]
    assert kept[:, 0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15]
    padded = seq.pad(kept)
    assert padded.shape == (4, 8, 1)
    assert padded[2, :, 0].tolist() == [5, 6, 7, 8, 9, 10, 11, 12]  # the first 8 of 9 events
    assert torch.equal(seq.unpad(padded), kept)
    assert seq.valid().sum(1).tolist() == [5, 0, 8, 2]
    assert torch.equal(seq.from_blocks(seq.to_blocks(kept)), kept)
    assert seq.block_user.tolist() == [0, 0, 2, 2, 3]
    local, keep = seq.window(4, 4)
    assert local.lengths.tolist() == [1, 0, 4, 0]
    assert kept[keep][:, 0].tolist() == [4, 9, 10, 11, 12]


def test_full_blocks_take_the_reshape_path_with_the_same_layout() -> None:
    seq = PackedSequence.build(torch.tensor([8, 4]), max_len=8, block_size=4)
    assert seq.full_blocks and not PackedSequence.build(torch.tensor([8, 3]), max_len=8, block_size=4).full_blocks
    x = torch.randn(12, 3)
    scattered = x.new_zeros(3, 4, 3).index_put((seq.block, seq.pos % 4), x)
    assert torch.equal(seq.to_blocks(x), scattered)
    assert torch.equal(seq.from_blocks(scattered), x)
    kept, full = pack_jagged(x, torch.tensor([8, 4]), max_len=8, block_size=4)
    assert kept is x and full.full_blocks  # nothing truncated: no copy


@pytest.mark.parametrize("events", [0, 5, 16])
def test_serving_requests_score_alike_in_both_layouts(events: int) -> None:
    """One request: no history at all (no tokens anywhere), a partial block, exactly full blocks."""
    from gem_workloads.scoring.engine import Engine, preset_model
    from gem_workloads.scoring.request import example_request, parse_request

    loaded = preset_model("tiny", seed=4)
    seq_len = loaded.config.seq_len
    req = parse_request(example_request(loaded.schema, 7, events, seed=events), loaded.schema, seq_len, 7)
    engine = Engine(loaded)
    packed = engine.score([req, req], True)
    model: Any = loaded.model
    model.padded_sequence = True
    padded = engine.score([req, req], True)
    for a, b in zip(packed, padded, strict=True):
        assert a.shape == (7, len(loaded.schema.tasks))
        assert float(abs(a - b).max()) < 1e-5
