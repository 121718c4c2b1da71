"""Reading denied calls out of the operator's log (runs everywhere; the real operator is in test_real_operator.py)."""

from __future__ import annotations

import pytest

from gem_testbed.controlplane.operator import forbidden_lines, refused_lines


@pytest.mark.parametrize(
    ("line", "denied"),
    [
        # The time stamp's milliseconds read 403: a succeeded timer is no denied call.
        ("[2026-12-03 14:35:26,403] kopf.objects         [INFO    ] [gem-work/ranker] Timer 'x' succeeded.", False),
        ("[2026-12-03 14:35:26,120] kopf._core.engines [ERROR   ] APIForbiddenError: ('pods is forbidden', ...)", True),
        ("[2026-12-03 14:35:26,120] kopf.objects [ERROR   ] Forbidden: pods is forbidden: User cannot list", True),
        ("[2026-12-03 14:35:26,403] kubernetes.client [ERROR ] (403) Reason: Forbidden", True),
        ("HTTP response status 403 for PATCH /apis/gem.dev/v1alpha1", True),
    ],
)
def test_a_denied_call_is_found_whatever_the_time_stamp(line: str, denied: bool) -> None:
    assert forbidden_lines(line) == ([line] if denied else [])


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        # A CI run's exec-auth test read the milliseconds of a succeeded login as a 401.
        ("[2026-12-04 20:40:12,401] kopf.activities.auth [INFO    ] Activity 'login' succeeded.", False),
        ("[2026-12-04 20:40:12,120] kopf.objects [ERROR   ] APIUnauthorizedError: ('Unauthorized', ...)", True),
        ("[2026-12-04 20:40:12,120] kubernetes.client [ERROR ] (401) Reason: Unauthorized", True),
        ("[2026-12-04 20:40:12,120] kopf.objects [INFO    ] Handler 'x' succeeded; priority 666401391.", False),
    ],
)
def test_an_unauthorized_call_is_found_whatever_the_time_stamp(line: str, refused: bool) -> None:
    assert refused_lines(line, 401) == ([line] if refused else [])
