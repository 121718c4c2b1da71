"""Candidates read the user state by index; experts and heads run grouped: same outputs, same checkpoints.

References: the per-candidate copy of the user state (``UserState.select``, the path before) and
the per-expert / per-head loops (``MoEInteraction.route_loop``, ``TaskHeads.forward_loop``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.models import build_model, get_preset  # noqa: E402
from gem_workloads.models.kunlun import KunlunModel, MoEInteraction  # noqa: E402
from gem_workloads.models.model_dir import load_model_dir, save_model_dir  # noqa: E402
from gem_workloads.scoring.engine import Engine, preset_model  # noqa: E402
from gem_workloads.scoring.request import collate_requests, example_request, parse_request  # noqa: E402

pytestmark = pytest.mark.workloads

# A Kunlun model with wider summaries than tiny's (more seeds than candidate tokens).
WIDE = get_preset("tiny").with_(num_seeds=6, embedding_dim=24, num_heads=2, num_layers=3)


def _model(seed: int = 0) -> Any:
    loaded = preset_model("tiny", seed=seed)
    torch.manual_seed(seed)
    loaded.model = build_model("kunlun", WIDE, loaded.schema).eval()
    loaded.config = WIDE
    return loaded


def _inputs(loaded: Any, sizes: tuple[int, ...]) -> Any:
    seq = loaded.config.seq_len
    reqs = [parse_request(example_request(loaded.schema, n, seq, seed=n), loaded.schema, seq, 64) for n in sizes]
    return collate_requests(reqs, loaded.schema, True)


@pytest.mark.parametrize("sizes", [(1,), (37,), (5, 1, 12)], ids=["one-candidate", "one-user", "three-users"])
def test_scores_and_embeddings_equal_the_per_candidate_copy(sizes: tuple[int, ...]) -> None:
    loaded = _model()
    model: KunlunModel = loaded.model
    inputs = _inputs(loaded, sizes)
    with torch.inference_mode():
        state = model.encode_user(inputs.user)
        copied = state.select(inputs.user_index)
        shared = model.score_candidates(state, inputs.candidates, inputs.user_index)
        reference = model.score_candidates(copied, inputs.candidates)
        emb = model.embed_candidates(state, inputs.candidates, inputs.user_index)
        ref_emb = model.embed_candidates(copied, inputs.candidates)
    assert shared.shape == (sum(sizes), loaded.schema.num_tasks)
    torch.testing.assert_close(shared, reference, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(emb, ref_emb, rtol=1e-4, atol=1e-5)


def test_the_engine_scores_the_same_either_way() -> None:
    loaded = _model(1)
    seq = loaded.config.seq_len
    reqs = [parse_request(example_request(loaded.schema, n, seq, seed=n), loaded.schema, seq, 64) for n in (9, 4)]
    shared, copied = Engine(loaded).score(reqs, True), Engine(loaded, copy_user_state=True).score(reqs, True)
    for a, b in zip(shared, copied, strict=True):
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), rtol=1e-4, atol=1e-6)


def _interaction() -> tuple[MoEInteraction, Any, Any]:
    torch.manual_seed(3)
    moe = MoEInteraction(n_in=9, n_out=5, dim=8, rank=4, hidden=16, num_domains=3)
    tokens = torch.randn(23, 9, 8)
    domain = torch.tensor([0] * 15 + [2] * 8)  # uneven, and domain 1 gets no row
    return moe, tokens, domain[torch.randperm(23)]


def test_grouped_experts_equal_the_loop_forward_and_backward() -> None:
    moe, tokens, domain = _interaction()
    x = tokens.clone().requires_grad_()
    grouped = moe.route(x, domain)
    torch.autograd.backward(grouped.square().sum())
    grads = {n: p.grad.clone() for n, p in moe.experts.named_parameters() if p.grad is not None}
    x_grad = x.grad.clone()
    moe.zero_grad(set_to_none=True)
    x.grad = None
    loop = moe.route_loop(x, domain)
    torch.autograd.backward(loop.square().sum())
    torch.testing.assert_close(grouped, loop, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad, x_grad, rtol=1e-4, atol=1e-6)
    assert set(grads) == {n for n, p in moe.experts.named_parameters() if p.grad is not None}
    for name, p in moe.experts.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6)
    with torch.no_grad():  # the packed (inference) path too
        torch.testing.assert_close(moe.route(tokens, domain), moe.route_loop(tokens, domain), rtol=1e-5, atol=1e-6)


def test_grouped_heads_equal_the_loop() -> None:
    loaded = _model(2)
    heads = loaded.model.heads
    x = torch.randn(11, loaded.model.embedding_size)
    with torch.no_grad():
        torch.testing.assert_close(heads(x), heads.forward_loop(x), rtol=1e-5, atol=1e-6)
        user = x[:1, 30:]
        split = heads.forward_split(x[:, :30], user, lambda t: t.expand(11, -1))
        joined = heads.forward_loop(torch.cat([x[:, :30], user.expand(11, -1)], dim=1))
        torch.testing.assert_close(split, joined, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(heads(x), heads.forward_loop(x), rtol=1e-5, atol=1e-6)  # with gradients


def test_packed_weights_follow_loads_and_moves_and_checkpoints_keep_their_names(tmp_path: Path) -> None:
    first, second = _model(4), _model(5)
    inputs = _inputs(first, (7,))

    def scores(model: Any) -> Any:
        with torch.inference_mode():
            state = model.encode_user(inputs.user)
            return model.score_candidates(state, inputs.candidates, inputs.user_index)

    def reference(model: Any) -> Any:
        with torch.inference_mode():
            state = model.encode_user(inputs.user).select(inputs.user_index)
            return model.heads.forward_loop(model.embed_candidates(state, inputs.candidates))

    before = scores(second.model)  # packs second's weights
    second.model.load_state_dict(first.model.state_dict())  # in place: the pack follows
    torch.testing.assert_close(scores(second.model), reference(first.model), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(before, scores(second.model))
    keys = set(second.model.state_dict())
    assert "interactions.0.experts.2.mlp.0.weight" in keys and "heads.heads.3.2.bias" in keys
    assert not any("packed" in k for k in keys)
    save_model_dir(tmp_path / "m", second.model, "kunlun", WIDE, second.schema, "v1")
    again = load_model_dir(tmp_path / "m")
    torch.testing.assert_close(scores(again.model), scores(second.model), rtol=1e-5, atol=1e-6)
    # A parameter replaced (not copied into, as .to() or sharding do): the pack is rebuilt from it.
    weight = second.model.interactions[1].experts[0].mlp[0].weight
    weight.data = weight.data * 2
    torch.testing.assert_close(scores(second.model), reference(second.model), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(scores(second.model), reference(first.model))
