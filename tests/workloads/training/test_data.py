"""Synthetic domains, the data-mixing loader and MovieLens-100k."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.data import (
    DomainSpec,
    MixingLoader,
    MovieLens,
    MovieLensNotFound,
    SyntheticConfig,
    SyntheticUniverse,
)

pytestmark = pytest.mark.workloads


def _loader(proportions: list[float], batch: int = 200, shard: int = 0) -> MixingLoader:
    cfg = SyntheticConfig(
        domains=(DomainSpec("feed"), DomainSpec("search"), DomainSpec("video")), num_users=200, num_items=300
    )
    universe = SyntheticUniverse(cfg)
    return MixingLoader([universe.domain(i) for i in range(3)], proportions, batch, seed=7, shard=shard)


def test_mixing_proportions_hold_within_tolerance() -> None:
    loader = _loader([0.6, 0.3, 0.1])
    counts = np.zeros(3)
    for step in range(60):
        counts += np.bincount(loader.block(step).domain, minlength=3)
    share = counts / counts.sum()
    np.testing.assert_allclose(share, [0.6, 0.3, 0.1], atol=0.015)


def test_mixing_zero_weight_domain_never_appears_and_labels_follow_domain() -> None:
    loader = _loader([0.5, 0.0, 0.5])
    block = loader.block(3)
    assert set(np.unique(block.domain)) <= {0, 2}
    # the CTR task of a domain is only labelled on that domain's rows; CVR everywhere
    for d in (0, 2):
        rows = block.domain == d
        assert (block.label_mask[rows, d] == 1).all()
        assert (block.label_mask[~rows, d] == 0).all()
    assert (block.label_mask[:, 3] == 1).all()


def test_mixing_is_a_function_of_seed_shard_and_step() -> None:
    a, b = _loader([1, 1, 1]).block(5), _loader([1, 1, 1]).block(5)
    np.testing.assert_array_equal(a.user["user_id"].values, b.user["user_id"].values)
    np.testing.assert_array_equal(a.sequence["seq_item_id"].values, b.sequence["seq_item_id"].values)
    other = _loader([1, 1, 1], shard=1).block(5)
    assert not np.array_equal(a.user["user_id"].values, other.user["user_id"].values)


def test_mixing_rejects_bad_proportions() -> None:
    with pytest.raises(ValueError, match="proportions"):
        _loader([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="3 sources"):
        _loader([1.0, 1.0])


def test_movielens_sequences_and_labels() -> None:
    try:
        ml = MovieLens(seq_len=8)
    except MovieLensNotFound as exc:
        pytest.skip(str(exc))
    assert len(ml.train_index) + len(ml.test_index) == 100_000
    assert 0.08 < len(ml.test_index) / 100_000 < 0.12
    events = ml.test_index[:50]
    block = ml.examples(events)
    assert block.size == 50
    seq = block.sequence["seq_item_id"]
    assert (seq.lengths <= 8).all() and seq.lengths.sum() == len(seq.values)
    # the history is the user's ratings strictly before the example, most recent last
    offset = 0
    for row, ev in enumerate(events):
        n = int(seq.lengths[row])
        expected = ml.ev_item[ev - n : ev]
        np.testing.assert_array_equal(seq.values[offset : offset + n], expected)
        assert (ml.ev_user[ev - n : ev] == ml.ev_user[ev]).all()
        offset += n
    ratings = ml.ev_rating[events]
    np.testing.assert_array_equal(block.labels[:, 0], ratings >= 4)
    np.testing.assert_array_equal(block.labels[:, 1], ratings == 5)
    # every test event of a user comes after all of that user's training events
    u = int(ml.ev_user[events[0]])
    train_u = ml.train_index[ml.ev_user[ml.train_index] == u]
    test_u = ml.test_index[ml.ev_user[ml.test_index] == u]
    assert train_u.max() < test_u.min()
