"""Messages for people: rounded numbers, one decision per sentence."""

from __future__ import annotations

from gem_operator.autoscaling.decision import Decision, Reason
from gem_operator.controllers.autoscaler import scaled_event
from gem_operator.controllers.humanize import duration, score


def test_numbers_are_rounded_for_people() -> None:
    assert duration(0.0123456) == "12.3 ms"
    assert duration(4.5) == "4.5 s"
    assert duration(0.0) == "0 s"
    assert duration(2.5e-6) == "2.5 µs"
    assert score(0.0123456789) == "12.3 ms of cross-tier communication per step"
    assert score(None) == "unknown"


def test_scaled_event_is_one_decision_per_sentence() -> None:
    up = Decision(
        4,
        2,
        "MetricsUnavailable",
        (
            Reason("bounds", "TooFewReplicas", "raised to minReplicas=4 (wanted 2)"),
            Reason("sm", "MetricsUnavailable", "no samples for the 2 Ready pods"),
        ),
    )
    assert up.message == "scaled up 2 -> 4: raised to minReplicas=4 (wanted 2); no samples for the 2 Ready pods"
    text = scaled_event(up)
    assert text == (
        "Scaled up from 2 to 4 replicas. Raised to minReplicas=4 (wanted 2). No samples for the 2 Ready pods."
    )
    sm = "SM active 0.21 vs target 0.60 over 5 Ready pods: 3 replicas"
    down = scaled_event(Decision(3, 5, "LowSmActive", (Reason("sm", "LowSmActive", sm),)))
    assert down.startswith("Scaled down from 5 to 3 replicas. SM active 0.21")
