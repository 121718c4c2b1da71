"""Trace replayer: open-loop HTTP load on the ranking server from a trace file (see :mod:`.runner`)."""
