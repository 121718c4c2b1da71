"""Model shapes and gradients per preset, the serving split, and CompSkip FLOPs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from gem_workloads.data import MixingLoader, SyntheticConfig, SyntheticUniverse, cap_schema  # noqa: E402
from gem_workloads.models import PRESETS, build_model, get_preset  # noqa: E402
from gem_workloads.models.features import Batch  # noqa: E402

pytestmark = pytest.mark.workloads


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _batch(preset: str, n: int, seed: int = 0) -> tuple[Batch, object]:
    cfg = get_preset(preset)
    universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=seed))
    schema = cap_schema(universe.schema, cfg.max_table_rows)
    loader = MixingLoader([universe.domain(i) for i in range(3)], [1, 1, 1], n, seed=seed, schema=schema)
    return loader.batch(0), schema


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("kind", ["kunlun", "dlrm"])
def test_shapes_and_gradients(preset: str, kind: str) -> None:
    n = 8 if preset in ("tiny", "small") else 2
    batch, schema = _batch(preset, n)
    cfg = get_preset(preset)
    if preset not in ("tiny", "small"):
        cfg = cfg.with_(num_layers=2)  # the preset's widths and sequence length, fewer layers (CPU time)
    torch.manual_seed(0)
    model = build_model(kind, cfg, schema)  # type: ignore[arg-type]
    logits = model(batch)
    assert logits.shape == (n, schema.num_tasks)  # type: ignore[attr-defined]
    assert torch.isfinite(logits).all()
    logits.sum().backward()
    dense_units = {id(p) for u in model.dense_units() for p in u.parameters()}
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), name
        if id(p) not in dense_units:
            assert name.startswith("sparse."), f"{name} is neither sparse nor in an FSDP unit"
    # the embedding tables and the first interaction layer actually learn something
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert any(g.abs().sum() > 0 for n, g in grads.items() if n.startswith("sparse."))


@pytest.mark.parametrize("kind", ["kunlun", "dlrm"])
def test_encode_once_score_many_matches_forward(kind: str) -> None:
    batch, schema = _batch("tiny", 6)
    torch.manual_seed(0)
    model = build_model(kind, get_preset("tiny"), schema)  # type: ignore[arg-type]
    model.eval()
    with torch.no_grad():
        full = model(batch)
        # each user row i paired with candidate i, but the user part computed once per user
        state = model.encode_user(batch.user)
        scored = model.score_candidates(state, batch.candidate, torch.arange(6))
        # broadcast: user 0 against all 6 candidates equals forward on user 0 repeated
        one = model.score_candidates(state, batch.candidate, torch.zeros(6, dtype=torch.long))
        repeated = model.score_candidates(state.select(torch.zeros(6, dtype=torch.long)), batch.candidate)
    torch.testing.assert_close(full, scored)
    torch.testing.assert_close(one, repeated)
    assert one[0].allclose(full[0], atol=1e-6)


def test_comp_skip_saves_sequence_flops() -> None:
    cfg = get_preset("small").with_(num_layers=4)
    batch, schema = _batch("small", 16)
    flops = {}
    for skip in (False, True):
        torch.manual_seed(0)
        model = build_model("kunlun", cfg.with_(comp_skip=skip), schema)  # type: ignore[arg-type]
        with FlopCounterMode(display=False) as counter:
            model(batch).sum().backward()
        flops[skip] = counter.get_total_flops()
    assert flops[True] < 0.7 * flops[False], flops


def test_block_attention_stays_inside_blocks() -> None:
    from gem_workloads.models.kunlun import BlockAttentionLayer

    torch.manual_seed(0)
    layer = BlockAttentionLayer(8, 2, block_size=4, ffn_mult=2)
    h = torch.randn(1, 8, 8, requires_grad=True)
    valid = torch.ones(1, 8, dtype=torch.bool)
    out = layer(h, valid)
    out[0, 1].sum().backward()  # a query in block 0
    assert h.grad is not None
    assert h.grad[0, 4:].abs().sum() == 0  # block 1 never influences block 0
    assert h.grad[0, :4].abs().sum() > 0
    np.testing.assert_array_equal(out.shape, (1, 8, 8))


@pytest.mark.parametrize("kind", ["kunlun", "dlrm"])
def test_every_dense_unit_runs_its_own_forward(kind: str) -> None:
    """FSDP2 gathers a unit's parameters in its forward hook: a unit whose submodules are called
    directly (bypassing its forward) would meet sharded parameters in training."""
    batch, schema = _batch("tiny", 4)
    model = build_model(kind, get_preset("tiny"), schema)  # type: ignore[arg-type]
    units = [u for u in model.dense_units() if any(True for _ in u.parameters())]
    called: set[int] = set()
    for unit in units:
        unit.register_forward_pre_hook(lambda m, _args: called.add(id(m)))
    model(batch)
    assert [type(u).__name__ for u in units if id(u) not in called] == []
