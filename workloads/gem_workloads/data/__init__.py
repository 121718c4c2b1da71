"""Training data: a synthetic multi-domain generator, MovieLens-100k, a domain-mixing loader, and Parquet
sources read as a stream (mixed by event time, with OneSeq histories joined at training time)."""

from __future__ import annotations

from .blocks import ExampleBlock, ExampleSource, Jagged, cap_schema, collate
from .mixing import MixingLoader
from .movielens import MovieLens, MovieLensNotFound, MovieLensSource, movielens_schema
from .parquet_stream import InvalidData
from .spec import DataSpec, DataSpecError, load_data_spec, parse_data_spec
from .stores import DataUnavailable
from .stream_loader import StreamLoader
from .synthetic import DomainSpec, SyntheticConfig, SyntheticDomain, SyntheticUniverse, synthetic_schema

__all__ = [
    "DataSpec",
    "DataSpecError",
    "DataUnavailable",
    "DomainSpec",
    "ExampleBlock",
    "ExampleSource",
    "InvalidData",
    "Jagged",
    "MixingLoader",
    "MovieLens",
    "MovieLensNotFound",
    "MovieLensSource",
    "StreamLoader",
    "SyntheticConfig",
    "SyntheticDomain",
    "SyntheticUniverse",
    "cap_schema",
    "collate",
    "load_data_spec",
    "movielens_schema",
    "parse_data_spec",
    "synthetic_schema",
]
