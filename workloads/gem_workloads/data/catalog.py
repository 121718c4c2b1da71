"""The time-ordered datasets, by name: what ``--data`` picks in the foundation pass, the vertical
models' training and the transfer evaluation (all three read the same timelines)."""

from __future__ import annotations

from .timeline import MovieLensTimeline, SyntheticTimeline, TimedDataset, TimelineConfig

DATASETS = ("synthetic", "movielens")


def load_dataset(name: str, seed: int = 0, synthetic: TimelineConfig | None = None) -> TimedDataset:
    """``synthetic`` (seeded, ``synthetic`` overrides its size) or ``movielens`` (fixed; the seed only
    changes model initialisation and shuffling)."""
    if name == "synthetic":
        cfg = synthetic or TimelineConfig()
        return SyntheticTimeline(TimelineConfig(**{**cfg.__dict__, "seed": seed}))
    if name == "movielens":
        return MovieLensTimeline()
    raise ValueError(f"--data: unknown dataset {name!r}; choose one of {list(DATASETS)}")
