"""Ranking server with request-oriented computation sharing (see :mod:`.app`).

The scoring itself (request body, engine, batcher) is :mod:`gem_workloads.scoring`, shared with
the precompute workers.
"""
