"""Autoscaling on GPU SM utilisation: pure policy, metric sources, trace replay.

- `policy`: the decision function (pure, time passed in) shared by the controller, `gemop replay`,
  `gemop demo` (through the controller) and the closed-loop load test: `desired_replicas(spec,
  state, observation, now, slo_p99_ms=...)`. Its parts: `pipeline` and `steps/` (the steps of one
  sync), `decision` (the structured `Decision` with typed reasons and limits), `observation`
  (inputs), `state` (`ScalerState`, kept in status), `signals` (the SM/queue recommendation), `slo`
  (the SLO feedback on the effective SM target), `trend` (the ramp lead), `panic` (burst handling).
- `sources`: where SM utilisation, queue and p99 latency come from (Prometheus HTTP API, or the
  embedded cluster).
- `service_model`, `traces`, `replay`, `report`, `replay_plot`: drive the same policy on simulated
  time against a trace (scale modes, warm-up, baselines) and report it.

This package's `__init__` imports nothing so that importing the pure policy never pulls in
aiohttp or matplotlib.
"""
