"""`gemop demo` and `gemop crds` from a non-editable install: a wheel built from the sources (with the testbed),
installed with --no-deps into a throwaway target directory (the shared environment is untouched),
run from a folder outside any checkout."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DATA = ROOT / "operator" / "gem_operator" / "data"


def test_package_data_copies_match_the_repository() -> None:
    """`gem_operator/data/` ships copies of crds/samples/ and the demo's trace; they must not drift."""
    samples = sorted(p.name for p in (ROOT / "crds" / "samples").glob("*.yaml"))
    assert sorted(p.name for p in (PACKAGE_DATA / "samples").glob("*.yaml")) == samples
    for name in samples:
        assert filecmp.cmp(ROOT / "crds" / "samples" / name, PACKAGE_DATA / "samples" / name, shallow=False), (
            f"copy crds/samples/{name} to operator/gem_operator/data/samples/"
        )
    trace = "azure-llm-2023-code.csv"
    assert filecmp.cmp(ROOT / "data" / "traces" / trace, PACKAGE_DATA / "traces" / trace, shallow=False)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_and_crds_work_from_an_installed_wheel(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    # What the image's build context holds (.dockerignore), plus the testbed that `gemop demo` needs
    # (the `testbed` extra): nothing else of the repository.
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("common", "operator", "workloads", "testbed"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("gem_operator-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)], check=True, timeout=120
    )
    shutil.rmtree(src)  # nothing of the sources left to fall back on
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "GEM_RESYNC_SECONDS": "1"}

    def gemop(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gem_operator.cli", *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import gem_operator; print(gem_operator.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.strip().startswith(str(site)), where.stdout
    crds = gemop("crds")
    assert crds.returncode == 0, crds.stderr
    assert crds.stdout.count("kind: CustomResourceDefinition") == 5
    assert not list(elsewhere.iterdir())  # printed, not written somewhere odd
    check = gemop("crds", "--check")
    assert check.returncode == 2 and "not in a gem-operator checkout" in check.stderr
    demo = gemop("demo", "--replay-seconds", "2", timeout=300)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Demo finished" in demo.stdout and "gem-pretrain" in demo.stdout and "Traceback" not in demo.stderr
