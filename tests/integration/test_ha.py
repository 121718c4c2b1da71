"""Two `gemop run` replicas with the same default flags: exactly one acts; the other takes over.

Real processes against the embedded cluster, peering through a KopfPeering object as in a
cluster. The peering lifetime is shortened here (GEM_PEERING_LIFETIME) to keep the test short;
bench/chaos.py measures takeover with the default.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest
import yaml

from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.drivers.demo import PEERING_NAME

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SAMPLES = Path(__file__).resolve().parents[2] / "crds" / "samples"
LIFETIME = 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Replica:
    def __init__(self, tmp: Path, name: str) -> None:
        self.log = tmp / f"{name}.log"
        self._out: IO[str] = self.log.open("w")
        env = {**os.environ, "GEM_RESYNC_SECONDS": "1", "GEM_PEERING_LIFETIME": str(LIFETIME)}
        cmd = [sys.executable, "-m", "gem_operator.cli", "run", "-n", "default", "--peering", PEERING_NAME,
               "--liveness", f"http://127.0.0.1:{free_port()}/healthz", "--metrics-port", "0"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._out, stderr=subprocess.STDOUT, text=True)

    def text(self) -> str:
        return self.log.read_text()

    @property
    def priority(self) -> int:
        found = re.search(r"priority (\d+), lifetime", self.text())
        assert found, self.text()[-2000:]
        return int(found.group(1))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self._out.close()


def peers(cluster: EmbeddedCluster) -> dict[str, dict[str, object]]:
    obj = cluster.get("kopf.dev/v1", "KopfPeering", PEERING_NAME, "default") or {}
    return dict(obj.get("status") or {})


def phase(cluster: EmbeddedCluster, name: str) -> str | None:
    obj = cluster.get("gem.dev/v1alpha1", "RankingService", name, "default") or {}
    return (obj.get("status") or {}).get("phase")


def sample(name: str) -> dict[str, object]:
    doc = yaml.safe_load((SAMPLES / "rankingservice.yaml").read_text())
    doc["metadata"]["name"] = name
    return dict(doc)


def test_two_default_replicas_elect_one_and_hand_over(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    a, b = Replica(tmp_path, "a"), Replica(tmp_path, "b")
    replicas = [a, b]
    try:
        cluster.wait_for(lambda: len(peers(cluster)) == 2, timeout=30)
        assert a.priority != b.priority  # same flags, distinct priorities
        leader, follower = (a, b) if a.priority > b.priority else (b, a)
        cluster.apply(sample("ranker-one"))
        cluster.wait_for(lambda: phase(cluster, "ranker-one") == "Ready", timeout=40)
        # kopf starts paused and stays so silently while a higher peer lives: the follower ran no handler.
        assert "Handler " not in follower.text() and "Handler " in leader.text()
        assert "Pausing all operators, including self" not in a.text() + b.text()

        # SIGTERM: the leader withdraws its record, the follower resumes at once.
        started = time.monotonic()
        leader.stop(signal.SIGTERM)
        cluster.wait_for(lambda: "Resuming operations" in follower.text(), timeout=LIFETIME + 10)
        assert time.monotonic() - started <= 5.0, follower.text()[-2000:]
        cluster.apply(sample("ranker-two"))
        cluster.wait_for(lambda: phase(cluster, "ranker-two") == "Ready", timeout=40)

        # kill -9: a new replica joins; whichever leads is killed, the other takes over once the
        # dead record's lifetime has passed.
        c = Replica(tmp_path, "c")
        replicas.append(c)
        cluster.wait_for(lambda: "priority" in c.text() and len(peers(cluster)) == 2, timeout=30)
        leader, follower = (c, follower) if c.priority > follower.priority else (follower, c)
        if follower is c:
            cluster.wait_for(lambda: "Activity 'login' succeeded" in c.text(), timeout=15)
        else:
            cluster.wait_for(lambda: "Pausing operations in favour of" in follower.text(), timeout=15)
        time.sleep(1.0)
        paused_text = follower.text()
        started = time.monotonic()
        leader.stop(signal.SIGKILL)
        cluster.wait_for(lambda: "Resuming operations" in follower.text()[len(paused_text) :], timeout=LIFETIME + 15)
        assert time.monotonic() - started <= LIFETIME + 5.0
        cluster.apply(sample("ranker-three"))
        cluster.wait_for(lambda: phase(cluster, "ranker-three") == "Ready", timeout=40)
    finally:
        for r in replicas:
            r.stop()
