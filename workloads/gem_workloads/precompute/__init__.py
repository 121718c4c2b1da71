"""Solaris precompute: Ray workers that turn upcoming candidate sets into stored user-ad embeddings.

- :mod:`gem_workloads.exchange`: the candidate-set stream entry the ranking tier publishes and the
  Redis embedding store the workers fill (shared with the ranking server, so below both).
- :mod:`.worker`: one consumer of the stream (consumer group, XAUTOCLAIM, write-then-XACK).
- :mod:`.service`: the pod's entry point: Ray actors, backlog metrics, graceful scale-in.
"""
