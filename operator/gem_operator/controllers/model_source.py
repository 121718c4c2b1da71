"""``model.fromTraining`` of RankingService and SolarisPrecompute: the version's URI, from the GEMTraining.

The reference is resolved on every pass (the pools' resync timer), so ``version: latest`` follows
the training: a newer exported version changes the pod template's model URI, and the Deployment's
rolling update (maxUnavailable 0, maxSurge 1) keeps the pods of the old version serving until the
new ones are Ready (their loader has pulled and verified the new version). A reference that cannot
be resolved (no such GEMTraining, no such version yet) never tears a running pool down: the pool
keeps the model it was last given (``status.model``) and says why in ``ModelResolved``; a pool that
never had one creates nothing until the version exists.
"""

from __future__ import annotations

from typing import Any

from gem_operator.api.common import ModelSource
from gem_operator.api.kinds import GEM_TRAINING
from gem_operator.controllers.models import pick_version
from gem_operator.controllers.reconcile import Outcome, PassContext


async def resolve_model(ctx: PassContext, model: ModelSource, outcome: Outcome) -> ModelSource | None:
    """``model`` with a URI to load; None when there is none to give the pods yet (conditions say why)."""
    ref = model.from_training
    if ref is None:
        outcome.draft.fields["model"] = {"uri": model.origin}
        return model
    previous: dict[str, Any] = dict((ctx.body.get("status") or {}).get("model") or {})
    training = await ctx.kube.get(GEM_TRAINING.api_version, GEM_TRAINING.kind, ref.name, ctx.namespace)
    models = ((training or {}).get("status") or {}).get("models") or []
    entry = pick_version(models, ref.version)
    if entry is None:
        if training is None:
            reason = "TrainingNotFound"
            message = f"model.fromTraining.name: no GEMTraining {ref.name!r} in namespace {ctx.namespace}"
        elif not models:
            reason = "NoModelExported"
            message = f"GEMTraining {ref.name!r} has exported no version yet (its status.models is empty)"
        else:
            listed = [m.get("version") for m in models]
            reason = "VersionNotFound"
            message = f"model.fromTraining.version: {ref.version} is not among GEMTraining {ref.name!r}'s {listed}"
        kept = previous.get("training") == ref.name and previous.get("uri")
        if kept:
            outcome.draft.condition("ModelResolved", "False", reason, f"{message}; keeping {_named(previous)}")
            outcome.draft.fields["model"] = previous
            return model.resolved(str(previous["uri"]))
        outcome.draft.condition("ModelResolved", "False", reason, f"{message}; no pods until it exists")
        outcome.draft.fields["phase"] = "WaitingForModel"
        return None
    version, uri = int(entry["version"]), str(entry["uri"])
    served = {"uri": uri, "training": ref.name, "version": version}
    outcome.draft.condition("ModelResolved", "True", "VersionFound", f"{_named(served)}: {uri}")
    outcome.draft.fields["model"] = served
    if previous.get("uri") and previous.get("uri") != uri:
        message = (
            f"rolling out {_named(served)} (was {_named(previous)}); "
            "the pods of the old one serve until the new ones are Ready"
        )
        outcome.events.append(("Normal", "ModelRollout", message))
    return model.resolved(uri)


def _named(model: dict[str, Any]) -> str:
    if model.get("version") is None:
        return str(model.get("uri"))
    return f"version {model['version']} of GEMTraining {model.get('training')!r}"
