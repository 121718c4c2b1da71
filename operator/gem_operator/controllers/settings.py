"""Operator-wide settings: kopf persistence, peering, the API client and the metrics endpoint.

Progress and diff-base go to annotations (not status) because our CRDs have structural status
schemas that would prune kopf's own status fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from typing import Any

import kopf

from gem_operator.controllers.reconcile import PassesInFlight
from gem_operator.envvars import env_number, env_switch, env_urls
from gem_operator.kube import KubeApi, auth

RESYNC_SECONDS = env_number("GEM_RESYNC_SECONDS", 10.0, above=0, at_most=3600)
METRICS_PORT = int(env_number("GEM_METRICS_PORT", 0, at_least=0, at_most=65535, whole=True))
# Model-cache peers for the loader (the chart's cache Service when its DaemonSet is enabled).
MODEL_PEERS: tuple[str, ...] = env_urls("GEM_MODEL_PEERS")
# Whether workload pods may mount the node cache hostPath (`model.loader.nodeCache`): "hostPath"
# (default: the embedded cluster, or a chart whose model-cache DaemonSet prepares the directory for
# the workloads' uid) or "off" (the chart's default install: no hostPath, so the pods pass the
# `baseline`/`restricted` Pod Security levels and never meet a root-owned cache directory).
NODE_CACHE = env_switch("GEM_NODE_CACHE", True, on=("hostPath", "on", "true", "1"), off=("off", "false", "0", "none"))
# Seconds a replica's peering record stays valid. kopf re-touches it 5-10 s before it expires, so
# a paused replica takes over from a `kill -9`ed leader within about this long. Shorter means a
# faster takeover but a keep-alive PATCH every few seconds, and a leader that cannot reach the API
# for longer than this (a long GC pause, an API outage) is presumed dead and a second replica
# starts acting beside it; kopf's default of 60 s errs the other way.
PEERING_LIFETIME = int(env_number("GEM_PEERING_LIFETIME", 15, at_least=1, whole=True))


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="gem.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="gem.dev", key="last-handled-configuration"
    )
    settings.persistence.finalizer = "gem.dev/finalizer"
    settings.posting.level = logging.WARNING
    # `kubectl describe` shows who decided: this operator, not the framework it is built on.
    settings.posting.reporting_component = "gem-operator"
    settings.posting.reporting_instance = os.environ.get("POD_NAME") or socket.gethostname()
    settings.posting.event_name_prefix = "gem-operator-"
    settings.peering.lifetime = PEERING_LIFETIME
    settings.peering.stealth = True  # keep-alives every few seconds would drown the log
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 30
    # A deleted pool's resync timer may be mid-pass (waiting on Prometheus); kopf releases the
    # finalizer only after that pass ends and, by default, looks again only every 60 s.
    settings.background.cancellation_polling = 2
    memo.kube = KubeApi.from_kubeconfig()
    memo.passes = PassesInFlight()
    if METRICS_PORT:
        from gem_operator.controllers.metrics import serve_metrics

        if serve_metrics(METRICS_PORT):
            logger.info("serving operator metrics on :%d/metrics", METRICS_PORT)


# Seconds shutdown waits for the passes in flight before closing the API client under them.
DRAIN_SECONDS = 20.0


@kopf.on.cleanup()
async def close(memo: kopf.Memo, logger: Any, **_: Any) -> None:
    passes = memo.get("passes")
    if passes is not None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_SECONDS):
                await passes.drained()
        if not passes.idle:
            logger.warning("closing the API client with passes still running after %.0f s", DRAIN_SECONDS)
    kube = memo.get("kube")
    if kube is not None:
        await kube.close()


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Through the official client when a kubeconfig or in-cluster config exists (exec plugins,
    OIDC, token refresh), else kopf's service-account and kubeconfig logins (``kube/auth.py``).
    The seam (``memo.kube``) logs in the same way."""
    return auth.login(**kwargs)
