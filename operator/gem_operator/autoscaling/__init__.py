"""Autoscaling on GPU SM utilisation: pure policy and metric sources.

- `policy`: the decision function (pure, time passed in) shared by the controller, `gemop replay`,
  `gemop demo` (through the controller) and the closed-loop load test: `desired_replicas(spec,
  state, observation, now, slo_p99_ms=...)`. Its parts: `pipeline` and `steps/` (the steps of one
  sync), `decision` (the structured `Decision` with typed reasons and limits), `observation`
  (inputs), `state` (`ScalerState`, kept in status), `signals` (the SM/queue recommendation), `slo`
  (the SLO feedback on the effective SM target), `trend` (the ramp lead), `levels` (the steps and falls
  the lead and the release read in the demand), `panic` (burst handling).
- `sources`: where SM utilisation, queue and p99 latency come from (Prometheus HTTP API, or the
  embedded cluster).
- `trend`: the ramp lead (a least-squares line over recent load).

The trace replay that drives this policy on simulated time (`gemop replay`) is `gem_operator.replay`,
outside the runtime. This package's `__init__` imports nothing so that importing the pure policy
never pulls in aiohttp.
"""
