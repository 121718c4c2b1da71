"""Ranking server with request-oriented computation sharing (see :mod:`.app` and :mod:`.engine`)."""
