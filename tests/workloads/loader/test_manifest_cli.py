"""Manifest format and bad-input handling: every bad argument gets a clear error naming it."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from gem_workloads.loader.cli import main
from gem_workloads.loader.errors import ManifestError
from gem_workloads.loader.manifest import Manifest, build_manifest, parse_size


def test_manifest_parts_and_digest(tmp_path: Path, helpers: Any, capsys: pytest.CaptureFixture[str]) -> None:
    src = helpers.make_model(tmp_path / "m", {"a.bin": 200_000, "d/b.bin": 65536, "e": 0})
    m = Manifest.from_json((src / "manifest.json").read_text())
    assert [f.path for f in m.files] == ["a.bin", "d/b.bin", "e"]
    assert [len(f.parts) for f in m.files] == [4, 1, 0]
    assert m.total_bytes == 265_536
    # The digest is of the canonical JSON, so re-serialising never changes a model's identity.
    assert Manifest.from_json(m.to_json()).digest == m.digest == build_manifest(src, 65536, algorithm="sha256").digest
    assert main(["manifest", str(src), "--part-size", "64KiB", "--algorithm", "sha256"]) == 0
    assert Manifest.from_json(capsys.readouterr().out).digest == m.digest


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d["files"][0].update(path="../etc/passwd"), "not a safe relative path"),
        (lambda d: d["files"][0].update(path="/abs"), "not a safe relative path"),
        (lambda d: d["files"][0]["parts"].pop(), "part hashes"),
        (lambda d: d["files"][0].update(sha256="xyz"), "sha256"),
        (lambda d: d.update(version=9), "version"),
        (lambda d: d["files"].append(dict(d["files"][0])), "twice"),
    ],
)
def test_manifest_rejects_bad_structure(tmp_path: Path, helpers: Any, mutate: Any, needle: str) -> None:
    src = helpers.make_model(tmp_path / "m", {"a.bin": 200_000})
    data = json.loads((src / "manifest.json").read_text())
    mutate(data)
    with pytest.raises(ManifestError, match=needle):
        Manifest.from_json(json.dumps(data))


def test_manifest_nested_too_deeply_is_a_manifest_error() -> None:
    """json's decoder recurses per level: an origin serving such a body was a RecursionError traceback."""
    with pytest.raises(ManifestError, match="not valid JSON: nested too deeply"):
        Manifest.from_json("[" * 100_000 + "]" * 100_000)


def test_parse_size() -> None:
    assert parse_size("16MiB", "x") == 16 << 20
    assert parse_size("64k", "x") == 64 << 10
    assert parse_size("4096", "x") == 4096
    assert parse_size("1.5GiB", "x") == 3 << 29
    assert parse_size("0.5k", "x") == 512


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["pull", "ftp://host/model", "DEST"], 2, "SOURCE: unsupported scheme 'ftp://'"),
        (["pull", "SRC", "DEST", "--part-size", "abc"], 2, "--part-size: cannot parse size 'abc'"),
        (["pull", "SRC", "DEST", "--part-size", "1"], 2, "--part-size: 1 bytes is outside"),
        (["pull", "SRC", "DEST", "--streams", "0"], 2, "--streams: 0 is outside"),
        (["pull", "SRC", "DEST", "--manifest", "gopher://x/m.json"], 2, "--manifest: unsupported scheme"),
        (["pull", "SRC", "DEST", "--peers", "file:///x"], 2, "--peers"),
        (
            ["pull", "SRC", "DEST", "--cache", "C", "--cache-high", "1MiB", "--cache-low", "2MiB"],
            2,
            "--cache-low",
        ),
        (["manifest", "NOPE"], 2, "DIR: "),
        (["pull"], 2, "required"),
        # urlsplit's ValueError (unclosed IPv6 bracket, port past 65535) is a usage error, not a traceback
        (["pull", "http://[::1/model", "DEST"], 2, "SOURCE: 'http://[::1/model' is not a valid URL"),
        (["pull", "http://origin:99999/model", "DEST"], 2, "SOURCE: 'http://origin:99999/model' is not a valid"),
        (["pull", "http:///model", "DEST"], 2, "SOURCE: 'http:///model' has no host:port"),
        (["pull", "SRC", "DEST", "--manifest", "https://[fe80::1/m.json"], 2, "--manifest: 'https://[fe80::1/m"),
        (["pull", "SRC", "DEST", "--peers", "http://node-a:8470,http://node-b:abc"], 2, "--peers: 'http://node-b:abc'"),
        (["pull", "SRC", "DEST", "--peers", "http://:8470"], 2, "--peers: 'http://:8470' has no host:port"),
        # an absolute watermark of 0 bytes would evict every model the moment it lands
        (["pull", "SRC", "DEST", "--cache", "C", "--cache-high", "0", "--cache-low", "0"], 2, "--cache-high: '0'"),
        (["pull", "SRC", "DEST", "--termination-log", "NOPE/log"], 2, "--termination-log: "),
    ],
)
def test_bad_input_names_the_argument(
    tmp_path: Path, helpers: Any, capsys: pytest.CaptureFixture[str], args: list[str], code: int, needle: str
) -> None:
    src = helpers.make_model(tmp_path / "SRC", {"a.bin": 100_000})
    args = [str(src) if a == "SRC" else str(tmp_path / a) if a in ("DEST", "C", "NOPE") else a for a in args]
    assert main(args) == code
    err = capsys.readouterr().err
    assert needle in err, err
    assert not (tmp_path / "DEST" / ".gem-load-complete").exists()


def test_missing_manifest_names_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"x" * 10)
    assert main(["pull", str(tmp_path / "src"), str(tmp_path / "dst"), "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert "--manifest: cannot read" in err and "not found" in err, err
    assert main(["pull", str(tmp_path / "src"), str(tmp_path / "d2"), "--manifest", str(tmp_path / "m.json")]) == 2
    assert "--manifest" in capsys.readouterr().err


def test_part_size_must_be_multiple_of_manifest_part(
    tmp_path: Path, helpers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    src = helpers.make_model(tmp_path / "src", {"a.bin": 100_000})
    rc = main(["pull", str(src), str(tmp_path / "dst"), "--part-size", "96KiB", "--progress", "none"])
    assert rc == 2
    assert "--part-size: 98304 is not a multiple" in capsys.readouterr().err


def test_pull_writes_the_summary_to_the_termination_log(tmp_path: Path, helpers: Any) -> None:
    """The operator reads modelLoadSeconds from the init container's termination message."""
    src = helpers.make_model(tmp_path / "m", {"a.bin": 200_000})
    log = tmp_path / "termination-log"
    args = ["pull", str(src), str(tmp_path / "dest"), "--progress", "none", "--termination-log", str(log)]
    assert main(args) == 0
    summary = json.loads(log.read_text())
    assert summary["bytes"] == 200_000 and summary["seconds"] >= 0
    assert summary["manifestDigest"] == Manifest.from_json((src / "manifest.json").read_text()).digest


def test_termination_log_that_cannot_be_written_warns_and_keeps_the_pull(
    tmp_path: Path, helpers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model is in DEST and verified when the summary is written: a status message that
    cannot be written (here a directory in its place) is a warning, not a failed pull."""
    src = helpers.make_model(tmp_path / "m", {"a.bin": 100_000})
    log = tmp_path / "log-is-a-directory"
    log.mkdir()
    args = ["pull", str(src), str(tmp_path / "dest"), "--progress", "none", "--termination-log", str(log)]
    assert main(args) == 0
    assert "warning: --termination-log: cannot write" in capsys.readouterr().err
    assert (tmp_path / "dest" / ".gem-load-complete").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["serve", "FILE", "--port", "PORT"], "CACHE_DIR: cannot use"),
        (["serve", "C", "--host", "no-such-host.invalid", "--port", "PORT"], "--host: cannot resolve"),
        (["serve", "C", "--port", "BUSY"], "--host/--port: cannot listen on"),
    ],
)
def test_serve_that_cannot_start_names_the_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    (tmp_path / "FILE").write_text("not a directory")
    with socket.socket() as busy, socket.socket() as free:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        free.bind(("127.0.0.1", 0))
        spare = free.getsockname()[1]
        subs = {"FILE": str(tmp_path / "FILE"), "C": str(tmp_path / "C"), "PORT": str(spare)}
        subs["BUSY"] = str(busy.getsockname()[1])
        free.close()
        assert main([subs.get(a, a) for a in args]) == 1
    assert needle in capsys.readouterr().err
