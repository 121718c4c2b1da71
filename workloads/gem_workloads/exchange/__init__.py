"""What the ranking tier and the precompute workers exchange through Redis.

The ranking server publishes each candidate set to a stream (:mod:`.messages`); the precompute
workers read it, score it and write user-ad embeddings to the store (:mod:`.store`), which the
server reads back when it ranks. Both sides import these definitions, so they sit below both
and neither side imports the other.
"""
