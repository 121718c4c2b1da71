"""The precompute pool on a local Ray session: a worker process killed mid-batch, the pool finishes its work."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")
ray = pytest.importorskip("ray")
redis = pytest.importorskip("redis")

from gem_workloads.exchange.messages import CandidateSet  # noqa: E402
from gem_workloads.exchange.store import Keys  # noqa: E402
from gem_workloads.precompute.service import PrecomputeMetrics, WorkerActor, backlog, run_pool  # noqa: E402
from gem_workloads.precompute.worker import WorkerConfig  # noqa: E402
from gem_workloads.scoring.engine import preset_model  # noqa: E402
from gem_workloads.scoring.request import example_request  # noqa: E402

pytestmark = [pytest.mark.workloads, pytest.mark.servers, pytest.mark.slow]

STREAM = "ray-cands"


@pytest.fixture(scope="module")
def ray_session() -> Iterator[Any]:
    """A local session whose workers run at the test's own priority.

    Ray starts its workers at nice 15, so any busy process at nice 0 on the test machine starves them:
    with five busy loops on two cores an actor importing torch took 184 s to start (15.5 s at nice 0),
    past the test's 120 s wait. The priority is not what the test checks."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_worker_niceness", "0")  # read by the raylet that ray.init starts
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_killed_worker_loses_nothing_and_pool_drains(ray_session: Any, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    loaded = preset_model("tiny")  # what the actors build: same preset, same version
    users = list(range(6))
    for u in users:
        body = example_request(loaded.schema, 3, 8, seed=u, user_id=100 + u)
        for j, cand in enumerate(body["candidates"]):
            cand["item_id"] = 1000 * u + j
        client.xadd(STREAM, CandidateSet(body, None, time.time()).fields())
    cfg = WorkerConfig(stream=STREAM, group="g", consumer="pod", key_prefix="r", claim_idle_ms=300, read_count=4)

    # A worker process that dies after computing its batch and before storing it.
    dying_cfg = {**cfg.__dict__, "consumer": "doomed", "die_after_compute": True}
    doomed = ray.remote(num_cpus=1, max_restarts=0)(WorkerActor).remote(dying_cfg, redis_url, redis_url, None, "tiny")
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(doomed.run.remote(30.0), timeout=120)
    pending = client.xpending(STREAM, "g")
    assert pending["pending"] == 4 and {c["name"] for c in pending["consumers"]} == {b"doomed"}
    assert backlog(client, STREAM, "g")[0] == 6

    stop = threading.Event()

    def stop_when_drained() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and backlog(client, STREAM, "g")[0] > 0:
            time.sleep(0.2)
        stop.set()

    watcher = threading.Thread(target=stop_when_drained, daemon=True)
    watcher.start()
    metrics = PrecomputeMetrics()
    total = run_pool(cfg, redis_url, redis_url, None, "tiny", 1, metrics, stop, slice_seconds=1.0, max_seconds=150)
    watcher.join(5)
    keys = Keys("r", loaded.version)
    stored = [client.exists(keys.exact(100 + u, 1000 * u + j)) for u in users for j in range(3)]
    assert all(stored)
    assert total.pairs_written == 18 and total.duplicates == 0 and total.claimed == 4
    assert metrics.registry.get_sample_value("gem_precompute_backlog") == 0
    assert metrics.registry.get_sample_value("gem_precompute_pairs_written_total") == 18
    # The pool's consumer left the group on a clean stop; the dead one holds nothing.
    consumers = {c["name"]: c["pending"] for c in client.xinfo_consumers(STREAM, "g")}
    assert consumers == {b"doomed": 0}
    client.close()
