"""The e2e suite (e2e/test_resources.py) through its kube backend, against the real control plane.

The same suite runs on the embedded cluster in the same `pytest` run (e2e/ is a test path); here it
is pointed at the shared real control plane (conftest.py) with ``GEM_E2E_KUBECONFIG``, as it would
be at kind: kubectl with validation (the API server publishes OpenAPI, evaluates the CRDs' schemas and
CEL rules), the operator installed by the chart and running with its ServiceAccount token, KWOK
walking pods to Ready (so the phases reach Running/Ready, ``GEM_E2E_EXPECT_READY=1``). The operator
must get no 403 for any of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import E2E_NAMESPACE, RealCluster

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "e2e" / "test_resources.py"
# Variables of the e2e suite that must come from here, not from the caller's environment.
E2E_VARIABLES = {"KUBECONFIG", "GEM_E2E_BACKEND", "GEM_E2E_KUBECONFIG", "GEM_E2E_KUBECTL_VALIDATE"}


def test_the_e2e_suite_passes_on_the_real_control_plane(operated: RealCluster) -> None:
    assert not operated.gem_objects(E2E_NAMESPACE), "the e2e suite starts on a cluster without GEM resources"
    env = {k: v for k, v in os.environ.items() if k not in E2E_VARIABLES}
    env.update(
        {
            "GEM_E2E_KUBECONFIG": str(operated.plane.kubeconfig),
            "GEM_E2E_BACKEND": "kube",
            "GEM_E2E_NAMESPACE": E2E_NAMESPACE,
            "GEM_E2E_EXPECT_READY": "1",  # KWOK makes the pods Ready
            "GEM_E2E_TIMEOUT": "120",
        }
    )
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider", "--durations=5"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert suite.returncode == 0, suite.stdout[-8000:] + suite.stderr[-3000:]
    assert " passed" in suite.stdout and " skipped" not in suite.stdout, suite.stdout[-3000:]
    print(suite.stdout[-2500:])
    assert operated.forbidden() == [], "the operator was denied calls during the e2e suite"
