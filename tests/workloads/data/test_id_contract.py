"""One id, one row, in training and in serving: the 64-bit id contract of `models.features`.

Training reads id columns with pyarrow into int64 (a uint64 column keeps its bits) and folds them
with `fold_ids`; serving reads JSON's Python ints and folds them with `fold_id`. A team's ids
written as int64 or uint64, negative hashes included, must land in the same table row both ways."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from gem_workloads.data.stream_mix import _ids as read_id_column
from gem_workloads.models.features import ID_MAX, ID_MIN, fold_id, fold_ids

signed = st.integers(min_value=ID_MIN, max_value=2**63 - 1)


@given(st.lists(signed, min_size=1, max_size=20), st.integers(min_value=1, max_value=2**40))
def test_an_id_folds_to_one_row_whether_written_signed_or_unsigned(ids: list[int], cardinality: int) -> None:
    unsigned = [v % 2**64 for v in ids]  # the same bits, as a uint64 column or a JSON number holds them
    for column in (pa.array(ids, pa.int64()), pa.array(unsigned, pa.uint64())):
        training = fold_ids(read_id_column(column).values, cardinality).tolist()
        assert training == [fold_id(v, cardinality) for v in ids]
        assert training == [fold_id(v, cardinality) for v in unsigned]
    assert all(0 <= r < cardinality for r in training)


def test_the_edges_of_the_range() -> None:
    assert fold_id(ID_MIN, 10) == fold_ids(np.array([ID_MIN]), 10)[0] == ID_MIN % 10
    assert fold_id(ID_MAX, 1000) == fold_id(-1, 1000) == 999
    assert fold_id(2**63, 7) == fold_id(ID_MIN, 7)


@given(signed)
def test_an_id_keys_the_embedding_store_once_whether_signed_or_unsigned(value: int) -> None:
    from gem_workloads.exchange.store import Keys

    keys = Keys("p", "v")
    unsigned = value % 2**64
    assert keys.exact(value, 1) == keys.exact(unsigned, 1) == keys.exact(str(unsigned), 1) == f"p:v:e:{value}:1"
    assert keys.memory(unsigned) == keys.memory(value)


def test_store_keys_keep_what_is_not_an_unsigned_id() -> None:
    from gem_workloads.exchange.store import key_part

    for part in ("_", "007", "+9223372036854775808", "18446744073709551616", "1700000000000-0", True, 2**63 - 1):
        assert key_part(part) == str(part)
