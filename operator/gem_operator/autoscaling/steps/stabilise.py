"""Step 4, stabilisation (HPA semantics): the count moves only as far as the windows agree. Pure.

Every recommendation is recorded; the result may rise only to the *lowest* recommendation of the
up window (`stabilizationSeconds.up`) and fall only to the *highest* of the down window. A hold
records nothing and keeps the count; idle and yielding precompute pools skip the windows.
"""

from __future__ import annotations

from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import Reason
from gem_operator.autoscaling.steps.observe import Observed
from gem_operator.autoscaling.steps.recommend import Recommendation


@dataclass(frozen=True)
class Stabilised:
    replicas: int
    recommendations: tuple[tuple[float, int], ...]  # the history to carry
    reasons: tuple[Reason, ...] = ()


def stabilise(spec: AutoscalingSpec, seen: Observed, rec: Recommendation, now: float) -> Stabilised:
    """The count the stabilisation windows allow for `rec`, and the history with it recorded."""
    if rec.replicas is None:
        return Stabilised(seen.current, seen.recommendations)
    if rec.at_once:
        return Stabilised(rec.replicas, seen.recommendations)
    want = rec.replicas
    recs = (*seen.recommendations, (now, want if rec.steady is None else rec.steady))
    up_rec = min([n for t, n in recs if t > now - spec.stabilization_seconds.up] + [want])
    down_rec = max([n for t, n in recs if t > now - spec.stabilization_seconds.down] + [want])
    out = min(max(seen.current, up_rec), down_rec)
    if out == want:
        return Stabilised(out, recs)
    return Stabilised(out, recs, (Reason("stabilisation", "Stabilised", f"stabilised to {out}"),))
