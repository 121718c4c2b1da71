"""Scoring ranking requests with a model: the request body, the engine and its dynamic batcher.

Why a package of its own: the ranking server answers requests with it and the precompute
workers run the same engine on the candidate sets the server publishes, so it sits below both
(neither of them imports the other).

- :mod:`.request`: the ``POST /v1/rank`` body, validated into arrays and collated into model inputs.
- :mod:`.engine`: model loading, scoring (with request-oriented computation sharing), the batcher.
- :mod:`.side_inputs`: the vertical model's knowledge-transfer inputs at request time.
"""
