"""The trace replay behind `gemop replay`: the autoscaling policy driven on simulated time.

`engine` drives `gem_operator.autoscaling.policy` (the controller's own decision function) with
a request trace (`traces`) through a service model (`service_model`, `round_robin`) and reports
GPU-hours, p99 per minute and SLO minutes against baselines (`report`); `command` is the
`gemop replay` command around it (flags, table or JSON, plot). It is a what-if tool: the
operator's runtime (controllers, kube, api, render, topology, autoscaling) never imports it
(import-linter contract), and its `--plot` comes from the testbed extra through an entry point.
"""
