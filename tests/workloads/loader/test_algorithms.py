"""Manifests that declare their digest algorithm (BLAKE3 by default), next to version-1 SHA-256 ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gem_workloads.loader.cli import main
from gem_workloads.loader.errors import IntegrityError, ManifestError
from gem_workloads.loader.manifest import Manifest, build_manifest
from gem_workloads.loader.pull import PullConfig, pull

SIZES = {"a.bin": 300_000, "d/b.bin": 65536, "e": 0}


def test_new_manifests_declare_blake3_and_old_ones_keep_their_digest(
    tmp_path: Path, helpers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    src = helpers.make_model(tmp_path / "m", SIZES)
    new = build_manifest(src, 65536)
    old = build_manifest(src, 65536, algorithm="sha256")
    raw = json.loads(new.to_json())
    assert raw["version"] == 2 and raw["algorithm"] == "blake3" and "digest" in raw["files"][0]
    assert json.loads(old.to_json())["version"] == 1 and "algorithm" not in json.loads(old.to_json())
    assert old.digest == Manifest.from_json((src / "manifest.json").read_text()).digest  # v1 unchanged
    assert new.digest != old.digest and new.files[0].parts != old.files[0].parts
    back = Manifest.from_json(new.to_json())
    assert back == new and back.algorithm == "blake3" and back.label == "BLAKE3"
    assert main(["manifest", str(src), "--part-size", "64KiB"]) == 0
    assert Manifest.from_json(capsys.readouterr().out).digest == new.digest


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (
            lambda d: d.update(algorithm="md5"),
            r"manifest field 'algorithm': unknown digest algorithm 'md5'.*--algorithm",
        ),
        (lambda d: d.pop("algorithm"), r"manifest field 'algorithm' is None"),
        (lambda d: d.update(version=1), r"'algorithm' needs version 2"),
        (lambda d: d["files"][0].update(digest="zz"), r"a\.bin: digest 'zz'"),
    ],
)
def test_bad_algorithm_fields_name_the_field(tmp_path: Path, helpers: Any, mutate: Any, needle: str) -> None:
    src = helpers.make_model(tmp_path / "m", SIZES, algorithm="blake3")
    data = json.loads((src / "manifest.json").read_text())
    mutate(data)
    with pytest.raises(ManifestError, match=needle):
        Manifest.from_json(json.dumps(data))


def test_pull_with_unknown_algorithm_is_bad_input(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "m", SIZES, algorithm="blake3")
    data = json.loads((src / "manifest.json").read_text())
    data["algorithm"] = "crc32"
    (src / "manifest.json").write_text(json.dumps(data))
    out = helpers.cli("pull", str(src), str(tmp_path / "dst"), "--progress", "none")
    assert out.returncode == 2, out.stderr
    assert "--manifest" in out.stderr and "'algorithm'" in out.stderr and "crc32" in out.stderr
    assert not (tmp_path / "dst" / "a.bin").exists()


@pytest.mark.servers
async def test_blake3_pull_verifies_resumes_and_catches_bad_bytes(tmp_path: Path, helpers: Any, nginx: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES, algorithm="blake3")
    n = nginx(src)
    await pull(n.url, tmp_path / "dst", cfg=PullConfig(streams=3))
    assert helpers.same_tree(src, tmp_path / "dst", list(SIZES))
    verified = helpers.cli("verify", str(tmp_path / "dst"))
    assert verified.returncode == 0 and json.loads(verified.stdout)["verified"] is True
    # A pulled file altered afterwards: `verify` names the part and the algorithm.
    bad = bytearray((tmp_path / "dst" / "a.bin").read_bytes())
    bad[70_000] ^= 1
    (tmp_path / "dst" / "a.bin").write_bytes(bytes(bad))
    out = helpers.cli("verify", str(tmp_path / "dst"))
    assert out.returncode == 3 and "a.bin part 1 does not match its BLAKE3" in out.stderr
    # An origin whose bytes differ from the manifest (same size): refused, nothing marked complete.
    (src / "a.bin").write_bytes(bytes(bad))
    with pytest.raises(IntegrityError, match=r"BLAKE3 mismatch in a\.bin part 1"):
        await pull(n.url, tmp_path / "dst2", cfg=PullConfig(streams=2))
    assert not (tmp_path / "dst2" / ".gem-load-complete").exists()
