"""The emulated accelerator: profile parsing, device time per batch, and replicas that add capacity.

Two real server processes (``python -m gem_workloads.serving --device emulated:h200``) on this
machine's CPUs: one alone, then both at once. With an emulated device, a replica's throughput is
set by the profile, so a second replica does not take it away (within 20 %), which is what lets
an autoscaler add capacity on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.serving.device import DeviceProfile, DeviceProfileError, EmulatedDevice

pytestmark = pytest.mark.workloads

PROFILE = {
    "device": "test",
    "seq_len": [16, 64],
    "candidates": [8, 64],
    "seconds": [[0.01, 0.02], [0.02, 0.04]],
    "per_extra_request_seconds": [0.001, 0.002],
}


def test_profile_interpolates_and_extrapolates() -> None:
    p = DeviceProfile.from_mapping(PROFILE)
    assert p.batch_seconds(8, 16) == pytest.approx(0.01)
    assert p.batch_seconds(36, 16) == pytest.approx(0.015)
    assert p.batch_seconds(36, 40) == pytest.approx((0.015 + 0.03) / 2)
    assert p.batch_seconds(120, 16) == pytest.approx(0.02 + 56 * (0.01 / 56))  # along the last slope
    assert p.batch_seconds(8, 1000) == pytest.approx(0.02)  # sequence length clamped
    assert p.batch_seconds(8, 16, requests=3) == pytest.approx(0.012)


def test_builtin_profile_is_valid_and_documented() -> None:
    p = DeviceProfile.builtin("h200")
    assert p.device == "h200" and "Replace it with a measured one" in p.description
    # Bigger batches cost more, and a batch of 8 is cheaper than 8 batches of 1 (batching pays).
    assert p.batch_seconds(1024, 1024) > p.batch_seconds(256, 1024)
    assert p.batch_seconds(8 * 1024, 1024, requests=8) < 8 * p.batch_seconds(1024, 1024)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"seq_len": [64, 16]}, "seq_len must increase strictly"),
        ({"seconds": [[0.01, 0.02]]}, "one row per seq_len"),
        ({"seconds": [[0.01, -1], [0.02, 0.04]]}, "seconds[0] must be 2 positive numbers"),
        ({"per_extra_request_seconds": [0.1]}, "per_extra_request_seconds must be 2 numbers"),
        ({"colour": "red"}, "unknown keys ['colour']"),
        ({"candidates": "many"}, "candidates must be a non-empty list"),
    ],
)
def test_bad_profiles_name_the_key(change: dict[str, Any], words: str) -> None:
    with pytest.raises(DeviceProfileError, match=words.replace("[", r"\[").replace("]", r"\]")):
        DeviceProfile.from_mapping({**PROFILE, **change}, "p.json")


def test_bad_device_flags(tmp_path: Path) -> None:
    with pytest.raises(DeviceProfileError, match="built-in"):
        DeviceProfile.builtin("tpu9")
    with pytest.raises(DeviceProfileError, match="positive"):
        EmulatedDevice(DeviceProfile.from_mapping(PROFILE), time_scale=0)
    bad = tmp_path / "p.json"
    bad.write_text("{nope")
    with pytest.raises(DeviceProfileError, match="not JSON"):
        DeviceProfile.load(bad)
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # a RecursionError in json
    with pytest.raises(DeviceProfileError, match="not JSON: nested too deeply"):
        DeviceProfile.load(tmp_path / "deep.json")
    from gem_workloads.serving.__main__ import main

    assert main(["--preset", "tiny", "--device", "emulated:tpu9"]) == 2
    assert main(["--preset", "tiny", "--device", "emulated:h200", "--device-profile", str(bad)]) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two emulated replicas: one batch of one request takes 40 ms of device time."""
    profile = tmp_path_factory.mktemp("dev") / "profile.json"
    profile.write_text(json.dumps({**PROFILE, "seconds": [[0.04, 0.04], [0.04, 0.04]]}))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs, urls = [], []
    for _ in range(2):
        port = _free_port()
        cmd = [sys.executable, "-m", "gem_workloads.serving", "--preset", "tiny", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--threads", "1", "--max-batch-size", "1"]
        cmd += ["--device", "emulated:test", "--device-profile", str(profile)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        urls.append(f"http://127.0.0.1:{port}")
    try:
        asyncio.run(_wait_ready(urls, procs))
        yield urls
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


async def _wait_ready(urls: list[str], procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 90
    async with aiohttp.ClientSession() as s:
        for url, proc in zip(urls, procs, strict=True):
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
                try:
                    async with s.get(url + "/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert time.monotonic() < deadline, "emulated server never became ready"
                await asyncio.sleep(0.2)


async def _closed_loop(session: aiohttp.ClientSession, url: str, body: bytes, seconds: float) -> int:
    """Requests completed in `seconds` by 4 clients that always keep one request open."""
    done = 0
    stop = time.monotonic() + seconds

    async def client() -> None:
        nonlocal done
        while time.monotonic() < stop:
            async with session.post(url + "/v1/rank", data=body, headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200, await r.text()
                await r.read()
                done += 1

    await asyncio.gather(*(client() for _ in range(4)))
    return done


async def _busy_seconds(session: aiohttp.ClientSession, url: str) -> float:
    async with session.get(url + "/metrics") as r:
        text = await r.text()
    for line in text.splitlines():
        if line.startswith("gem_emulated_device_busy_seconds_total"):
            return float(line.split()[-1])
    raise AssertionError("no gem_emulated_device_busy_seconds_total in /metrics")


@pytest.mark.slow
def test_throughput_is_the_profiles_and_a_second_replica_adds_capacity(servers: list[str]) -> None:
    async def run() -> tuple[float, list[float], float]:
        async with aiohttp.ClientSession() as s:
            async with s.get(servers[0] + "/v1/example-request", params={"candidates": "8"}) as r:
                body = await r.read()
            window = 4.0
            alone = await _closed_loop(s, servers[0], body, window) / window
            both = await asyncio.gather(*(_closed_loop(s, u, body, window) for u in servers))
            busy = await _busy_seconds(s, servers[0])
            return alone, [n / window for n in both], busy

    alone, both, busy = asyncio.run(run())
    # 40 ms per batch of one request: 25 requests/s, whatever the CPU does.
    assert 25 * 0.8 <= alone <= 25 * 1.05, alone
    for rate in both:
        assert rate >= alone * 0.8, (alone, both)
    # The device was busy (nearly) all the time it was loaded: 8 s of closed-loop load.
    assert 8 * 0.8 <= busy <= 8 * 1.1, busy
