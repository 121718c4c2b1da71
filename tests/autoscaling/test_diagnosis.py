"""Which usual real-cluster cause emptied a default query: each branch of `diagnosis.py` from the
counts Prometheus would answer (the real-Prometheus reproductions are in test_prometheus_real.py)."""

from __future__ import annotations

import pytest

from gem_operator.autoscaling.diagnosis import SM_METRIC, Count, why_no_server_series, why_no_sm_samples

METRIC = "gem_ranking_request_seconds_bucket"


def counter(answers: dict[str, float], asked: list[str]) -> Count:
    """A `count` answering the first entry whose key the query contains (0 otherwise)."""

    async def count(query: str) -> float:
        asked.append(query)
        return next((v for k, v in answers.items() if k in query), 0.0)

    return count


@pytest.mark.parametrize(
    ("answers", "says", "queries"),
    [
        ({"kubernetes_pod_name=~": 4}, "carry kubernetes_namespace and kubernetes_pod_name", 1),
        ({}, f"Prometheus holds no {METRIC} series at all: are the ranking servers scraped?", 2),
        ({'pod!=""': 0, f"count({METRIC})": 12}, f"none of its 12 {METRIC} series has a pod label", 3),
        ({'pod!=""': 12, f"count({METRIC})": 12}, "", 3),  # labelled, just not these pods' (yet)
    ],
)
async def test_server_series(answers: dict[str, float], says: str, queries: int) -> None:
    asked: list[str] = []
    why = await why_no_server_series(counter(answers, asked), METRIC)
    assert (why == "") if not says else (says in why and "docs/dcgm-exporter.md, section 4" in why)
    assert len(asked) == queries and all(q.startswith(f"count({METRIC}") for q in asked)


@pytest.mark.parametrize(
    ("answers", "says"),
    [
        ({"exported_pod=~": 2}, "set honor_labels: true on the dcgm-exporter scrape job"),
        ({}, f"Prometheus holds no {SM_METRIC} series at all"),
        ({'pod!=""': 0, f"count({SM_METRIC})": 3}, f"none of its 3 {SM_METRIC} series has a pod label"),
        ({'pod!=""': 3, f"count({SM_METRIC})": 3}, ""),
    ],
)
async def test_sm_series(answers: dict[str, float], says: str) -> None:
    why = await why_no_sm_samples(counter(answers, []))
    assert (why == "") if not says else says in why
