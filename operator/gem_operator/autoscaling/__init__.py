"""Autoscaling on GPU SM utilisation: pure policy, metric sources, trace replay.

- `policy`: the decision function (pure, time passed in) shared by the controller and replay.
- `sources`: where SM utilisation comes from (Prometheus HTTP API, or the embedded cluster).
- `service_model` and `replay`: drive the same policy on simulated time against a trace.

This package's `__init__` imports nothing so that importing the pure policy never pulls in
aiohttp or matplotlib.
"""
