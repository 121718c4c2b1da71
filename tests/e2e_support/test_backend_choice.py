"""The e2e suite reaches a real cluster only when one is named, and refuses one that holds GEM resources."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def e2e_conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gem_e2e_conftest", ROOT / "e2e" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kubeconfig_alone_never_selects_a_real_cluster() -> None:
    select = e2e_conftest().select_backend
    assert select({"KUBECONFIG": "/home/me/.kube/config"}, None) == ("embedded", None)
    assert select({}, None) == ("embedded", None)
    assert select({"GEM_E2E_KUBECONFIG": "/tmp/kind"}, None) == ("kube", "/tmp/kind")
    assert select({}, "/tmp/kind") == ("kube", "/tmp/kind")
    assert select({"GEM_E2E_BACKEND": "embedded", "GEM_E2E_KUBECONFIG": "/tmp/kind"}, None) == ("embedded", None)
    with pytest.raises(pytest.UsageError, match="--kubeconfig PATH"):
        select({"GEM_E2E_BACKEND": "kube", "KUBECONFIG": "/home/me/.kube/config"}, None)
    with pytest.raises(pytest.UsageError, match="kube or embedded"):
        select({"GEM_E2E_BACKEND": "prod"}, None)


def test_a_cluster_with_gem_resources_is_refused() -> None:
    message = e2e_conftest().occupied_message
    assert message("/tmp/kind", []) is None
    text = message("/tmp/kind", [f"gemtraining.gem.dev/job-{i}" for i in range(7)])
    assert text is not None and "already has GEM resources" in text and "and 2 more" in text


def test_pytest_e2e_with_kubeconfig_set_runs_on_the_embedded_cluster(tmp_path: Path) -> None:
    """`pytest e2e` with a $KUBECONFIG in the environment: collection picks the embedded backend."""
    bogus = tmp_path / "kubeconfig"
    bogus.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_probe(backend_choice):\n    assert backend_choice == 'embedded'\n")
    (tmp_path / "conftest.py").write_text((ROOT / "e2e" / "conftest.py").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("GEM_E2E_KUBECONFIG", "GEM_E2E_BACKEND")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
        cwd=tmp_path,
        env={**env, "KUBECONFIG": str(bogus)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
