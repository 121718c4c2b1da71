"""Solaris precompute: Ray workers that turn upcoming candidate sets into stored user-ad embeddings.

- :mod:`.messages`: the candidate-set stream entry the ranking tier publishes.
- :mod:`.store`: the Redis embedding store (versioned keys, TTL) and the degrade-not-drop read path.
- :mod:`.worker`: one consumer of the stream (consumer group, XAUTOCLAIM, write-then-XACK).
- :mod:`.service`: the pod's entry point: Ray actors, backlog metrics, graceful scale-in.
"""
