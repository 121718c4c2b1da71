"""Fixed-time replicas behind round robin, request by request (`autoscaling.round_robin`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_operator.replay.round_robin import RoundRobinQueues

D = 0.2


def _queues(pods: int) -> RoundRobinQueues:
    q = RoundRobinQueues(D)
    q.resize(pods)
    return q


@pytest.mark.parametrize(
    ("pods", "units", "max_latency"),
    [
        (1, 1, D),  # an idle replica: service time only
        (4, 4, D),  # one request each
        (1, 5, 5 * D),  # five on one replica in one second: the last waits for four before it
        (2, 10, 5 * D),  # round robin splits them 5 / 5
    ],
)
def test_latency_of_one_second(pods: int, units: float, max_latency: float) -> None:
    served = _queues(pods).step(units, 0.0, 1.0, ready=pods)
    assert len(served.latencies) == units
    assert min(served.latencies) == pytest.approx(D)
    assert max(served.latencies) <= max_latency + 1e-9


def test_fractions_carry_to_the_next_second() -> None:
    q = _queues(1)
    counts = [len(q.step(0.5, float(t), 1.0, ready=1).latencies) for t in range(10)]
    assert counts == [0, 1] * 5


def test_a_queue_outlives_its_second_and_counts_as_backlog() -> None:
    q = _queues(1)
    first = q.step(10, 0.0, 1.0, ready=1)  # 2 s of work in one second
    assert first.backlog_seconds > 0.9  # what was not served by the end of the second waits
    assert first.utilisation + first.backlog_seconds == pytest.approx(2.0)
    second = q.step(0, 1.0, 1.0, ready=1)  # nothing new: the backlog is the next seconds' work
    assert second.utilisation == pytest.approx(min(1.0, first.backlog_seconds))
    third = q.step(0, 2.0, 1.0, ready=1)
    assert second.utilisation + third.utilisation == pytest.approx(first.backlog_seconds)
    assert third.backlog_seconds == pytest.approx(0.0, abs=1e-9)
    assert q.next_wait(3.0, 1) == 0.0


def test_no_ready_replica_refuses_like_a_service_without_endpoints() -> None:
    served = _queues(3).step(4, 0.0, 1.0, ready=0)
    assert served.refused == 4 and served.latencies == []


def test_shrinking_drops_the_newest_pods_and_their_queues() -> None:
    q = _queues(3)
    q.busy_until[:] = [1.0, 2.0, 3.0]
    q.resize(2)
    assert q.busy_until == [1.0, 2.0]
    q.resize(4)
    assert q.busy_until == [1.0, 2.0, 0.0, 0.0]


def test_service_time_must_be_positive() -> None:
    with pytest.raises(ValueError, match="service_seconds"):
        RoundRobinQueues(0.0)


@settings(max_examples=60, deadline=None)
@given(
    pods=st.integers(1, 8),
    loads=st.lists(st.floats(0, 60, allow_nan=False), min_size=1, max_size=30),
)
def test_work_is_conserved_and_latency_is_never_below_the_service_time(pods: int, loads: list[float]) -> None:
    q = _queues(pods)
    arrived = 0
    busy = 0.0
    for t, units in enumerate(loads):
        served = q.step(units, float(t), 1.0, ready=pods)
        arrived += len(served.latencies)
        busy += served.utilisation * pods
        assert 0.0 <= served.utilisation <= 1.0
        assert all(lat >= D - 1e-9 for lat in served.latencies)
    # Every arrival's service time is either done (busy) or still queued (backlog).
    assert busy + served.backlog_seconds == pytest.approx(arrived * D, rel=1e-6, abs=1e-6)
