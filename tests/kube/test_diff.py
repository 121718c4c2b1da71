"""Drift detection ignores what the server adds and catches what we own."""

from __future__ import annotations

import pytest

from gem_operator.kube.diff import is_subset


@pytest.mark.parametrize(
    ("desired", "actual", "expected"),
    [
        ({"a": 1}, {"a": 1, "b": 2}, True),
        ({"a": {"x": 1}}, {"a": {"x": 1, "y": 0}}, True),
        ({"a": [{"n": 1}]}, {"a": [{"n": 1, "protocol": "TCP"}]}, True),
        ({"a": [{"n": 1}]}, {"a": [{"n": 1}, {"n": 2}]}, False),
        ({"a": 1}, {"a": 2}, False),
        ({"a": 1}, {}, False),
        ({"a": {"x": 1}}, {"a": "x"}, False),
        ({"port": 8080}, {"port": "8080"}, True),
        ({"replicas": 3}, {"replicas": 3.0}, True),
    ],
)
def test_is_subset(desired: object, actual: object, expected: bool) -> None:
    assert is_subset(desired, actual) is expected
