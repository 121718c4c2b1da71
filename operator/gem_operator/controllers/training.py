"""GEMTraining handlers: a headless Service, the job's ConfigMap and one pod per host.

Placement is left to the default scheduler here; pods are not pinned.
"""

from __future__ import annotations

from typing import Any

import kopf

from gem_operator.api.kinds import GEM_TRAINING
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.controllers.reconcile import Outcome, PassContext, apply_children, prune_children, reconcile
from gem_operator.controllers.settings import RESYNC_SECONDS
from gem_operator.controllers.status import observe_gang, training_phase
from gem_operator.render.common import LABEL_ROLE, Owner
from gem_operator.render.training import ROLE_WORKER, render_training

INFO = GEM_TRAINING


async def training_pass(ctx: PassContext, spec: GEMTrainingSpec, outcome: Outcome) -> None:
    owner = Owner.from_body(dict(ctx.body))
    children = render_training(owner, spec, resume_from=(ctx.body.get("status") or {}).get("lastCheckpoint"))
    await apply_children(ctx, INFO, children.all(), outcome)
    keep = {p["metadata"]["name"] for p in children.pods}
    await prune_children(ctx, INFO, "v1", "Pod", keep, outcome, {LABEL_ROLE: ROLE_WORKER})
    pods = [
        p
        for p in await ctx.kube.list(
            "v1", "Pod", ctx.namespace, {"gem.dev/instance": ctx.name, LABEL_ROLE: ROLE_WORKER}
        )
        if p["metadata"]["name"] in keep
    ]
    outcome.draft.fields["worldSize"] = spec.world_size
    training_phase(outcome.draft, observe_gang(len(children.pods), pods), spec.suspend)
    if spec.suspend and ctx.body.get("status", {}).get("phase") != "Suspended":
        outcome.events.append(("Normal", "Suspended", "spec.suspend is true: pods removed"))


@kopf.on.resume(INFO.group, INFO.version, INFO.plural)
@kopf.on.create(INFO.group, INFO.version, INFO.plural)
@kopf.on.update(INFO.group, INFO.version, INFO.plural, field="spec")
@kopf.timer(INFO.group, INFO.version, INFO.plural, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
async def reconcile_training(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    await reconcile(INFO, training_pass, body=body, patch=patch, memo=memo, logger=logger)
