"""Training data: a synthetic multi-domain generator, MovieLens-100k, and a domain-mixing loader."""

from __future__ import annotations

from .blocks import ExampleBlock, ExampleSource, Jagged, cap_schema, collate
from .mixing import MixingLoader
from .movielens import MovieLens, MovieLensNotFound, MovieLensSource, movielens_schema
from .synthetic import DomainSpec, SyntheticConfig, SyntheticDomain, SyntheticUniverse, synthetic_schema

__all__ = [
    "DomainSpec",
    "ExampleBlock",
    "ExampleSource",
    "Jagged",
    "MixingLoader",
    "MovieLens",
    "MovieLensNotFound",
    "MovieLensSource",
    "SyntheticConfig",
    "SyntheticDomain",
    "SyntheticUniverse",
    "cap_schema",
    "collate",
    "movielens_schema",
    "synthetic_schema",
]
