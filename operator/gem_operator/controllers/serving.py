"""RankingService and SolarisPrecompute handlers: a Deployment (and a Service for the ranker)."""

from __future__ import annotations

from typing import Any

import kopf
from pydantic import ValidationError

from gem_operator.api.kinds import RANKING_SERVICE, SOLARIS_PRECOMPUTE
from gem_operator.api.serving import RankingServiceSpec, SolarisPrecomputeSpec
from gem_operator.controllers import metrics
from gem_operator.controllers.autoscaler import autoscale
from gem_operator.controllers.model_source import resolve_model
from gem_operator.controllers.pod_reasons import cache_fallbacks, not_ready_summary
from gem_operator.controllers.reconcile import Outcome, PassContext, apply_children, reconcile
from gem_operator.controllers.settings import MODEL_PEERS, NODE_CACHE, RESYNC_SECONDS
from gem_operator.controllers.status import model_load_seconds, pool_phase, precision_plan
from gem_operator.render.common import Owner, child_name, selector_labels
from gem_operator.render.serving import (
    ROLE_PRECOMPUTE,
    ROLE_SERVER,
    desired_replicas_from_spec,
    pool_selector,
    render_precompute,
    render_ranking_service,
)


def replicas_owner(outcome: Outcome, spec: RankingServiceSpec | SolarisPrecomputeSpec) -> None:
    """Condition `ReplicasFromSpec`: whether spec.replicas (kubectl scale, HPA, KEDA) sets the replicas."""
    if spec.autoscaling.enabled:
        outcome.draft.condition(
            "ReplicasFromSpec",
            "False",
            "BuiltInAutoscaler",
            f"the built-in autoscaler owns replicas; spec.replicas ({spec.replicas}) is only its starting point. "
            "To scale with kubectl scale, HPA or KEDA, set spec.autoscaling.enabled: false.",
        )
    else:
        outcome.draft.condition(
            "ReplicasFromSpec", "True", "AutoscalerDisabled", f"spec.replicas ({spec.replicas}) sets the replicas"
        )


async def _pool_pass(
    ctx: PassContext, spec: RankingServiceSpec | SolarisPrecomputeSpec, outcome: Outcome, role: str
) -> None:
    owner = Owner.from_body(dict(ctx.body))
    info = RANKING_SERVICE if isinstance(spec, RankingServiceSpec) else SOLARIS_PRECOMPUTE
    model = await resolve_model(ctx, spec.model, outcome)
    if model is None:
        return  # nothing to load yet; the resync timer resolves it again
    spec = spec.model_copy(update={"model": model})
    name = child_name(owner, role)
    deployment = await ctx.kube.get("apps/v1", "Deployment", name, ctx.namespace)
    pods = await ctx.kube.list("v1", "Pod", ctx.namespace, selector_labels(owner, role)) if deployment else []
    loaded = model_load_seconds(pods)
    metrics.MODEL_CACHE_FALLBACK_PODS.labels(info.kind, ctx.namespace, ctx.name).set(len(cache_fallbacks(pods)))
    outcome.draft.fields["modelLoadSeconds"] = (
        loaded if loaded is not None else (ctx.body.get("status") or {}).get("modelLoadSeconds")
    )
    plan = precision_plan(pods) if spec.precision != "fp32" else None
    outcome.draft.fields["precision"] = (
        plan if plan is not None or spec.precision == "fp32" else (ctx.body.get("status") or {}).get("precision")
    )
    replicas_owner(outcome, spec)
    if not spec.autoscaling.enabled:
        replicas = spec.replicas  # HPA/KEDA drive spec.replicas through the scale subresource
    elif deployment is None:
        replicas = desired_replicas_from_spec(spec)
    else:
        current = int((deployment.get("spec") or {}).get("replicas") or 0)
        replicas = await autoscale(ctx, info.kind, spec, pods, current, outcome)
    if isinstance(spec, RankingServiceSpec):
        precompute = await _referenced_precompute(ctx, spec)
        manifests = render_ranking_service(
            owner, spec, replicas, MODEL_PEERS, node_cache=NODE_CACHE, precompute=precompute
        )
    else:
        manifests = render_precompute(owner, spec, replicas, MODEL_PEERS, NODE_CACHE)
    await apply_children(ctx, info, manifests, outcome)
    deployment = await ctx.kube.get("apps/v1", "Deployment", name, ctx.namespace)
    outcome.draft.fields["selector"] = pool_selector(owner, role)
    pool_phase(outcome.draft, replicas, deployment, not_ready_summary(pods))


async def _referenced_precompute(ctx: PassContext, spec: RankingServiceSpec) -> SolarisPrecomputeSpec | None:
    """The spec of ``spec.precomputeRef`` (same namespace); ``None`` when unset, absent or invalid
    (the ranker then serves without precomputed embeddings, which it tolerates)."""
    if not spec.precompute_ref:
        return None
    body = await ctx.kube.get(
        SOLARIS_PRECOMPUTE.api_version, SOLARIS_PRECOMPUTE.kind, spec.precompute_ref, ctx.namespace
    )
    if body is None:
        return None
    try:
        return SolarisPrecomputeSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return None


async def ranking_pass(ctx: PassContext, spec: RankingServiceSpec, outcome: Outcome) -> None:
    await _pool_pass(ctx, spec, outcome, ROLE_SERVER)


async def precompute_pass(ctx: PassContext, spec: SolarisPrecomputeSpec, outcome: Outcome) -> None:
    await _pool_pass(ctx, spec, outcome, ROLE_PRECOMPUTE)


_RKS = RANKING_SERVICE
_SPC = SOLARIS_PRECOMPUTE


@kopf.on.resume(_RKS.group, _RKS.version, _RKS.plural)
@kopf.on.create(_RKS.group, _RKS.version, _RKS.plural)
@kopf.on.update(_RKS.group, _RKS.version, _RKS.plural, field="spec")
@kopf.timer(_RKS.group, _RKS.version, _RKS.plural, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
async def reconcile_ranking(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    await reconcile(_RKS, ranking_pass, body=body, patch=patch, memo=memo, logger=logger)


@kopf.on.resume(_SPC.group, _SPC.version, _SPC.plural)
@kopf.on.create(_SPC.group, _SPC.version, _SPC.plural)
@kopf.on.update(_SPC.group, _SPC.version, _SPC.plural, field="spec")
@kopf.timer(_SPC.group, _SPC.version, _SPC.plural, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
async def reconcile_precompute(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    await reconcile(_SPC, precompute_pass, body=body, patch=patch, memo=memo, logger=logger)


def autoscaler_owns_replicas_message(kind: str, old: object, new: object, in_effect: object) -> str:
    """One decision, one sentence each: what was asked, what holds, how to change who decides."""
    return (
        f"spec.replicas changed {old} -> {new} (kubectl scale or another scaler), but the built-in autoscaler owns "
        f"this {kind}'s replicas and keeps {in_effect}. To scale by hand or with HPA/KEDA, set "
        "spec.autoscaling.enabled: false."
    )


@kopf.on.field(_RKS.group, _RKS.version, _RKS.plural, field="spec.replicas")
@kopf.on.field(_SPC.group, _SPC.version, _SPC.plural, field="spec.replicas")
async def replicas_edited(body: kopf.Body, old: Any, new: Any, reason: Any, **_: Any) -> None:
    """`kubectl scale` on a pool the built-in autoscaler drives: say so instead of silently undoing it."""
    if str(reason) != "update" or new is None or old == new:
        return  # created/resumed, or not a change of spec.replicas
    old = 1 if old is None else old  # absent means the schema's default
    autoscaling = (body.get("spec") or {}).get("autoscaling") or {}
    if autoscaling.get("enabled", True) is False:
        return  # HPA/KEDA/kubectl own spec.replicas: the Deployment follows it
    in_effect = (body.get("status") or {}).get("desiredReplicas", "its own count")
    message = autoscaler_owns_replicas_message(str(body.get("kind")), old, new, in_effect)
    kopf.event(body, type="Warning", reason="AutoscalerOwnsReplicas", message=message)
