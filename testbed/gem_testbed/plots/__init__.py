"""The rig's PNGs (matplotlib, Agg): the replay's report, the demo's scaling and the load test's pools."""
