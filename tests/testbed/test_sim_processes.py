"""The process kubelet: serving pods of the embedded cluster run as real local processes.

Each test's container is a few lines of Python (an HTTP server whose /readyz turns 200 only once a
file appears), so the tests exercise the kubelet's job, not the ranking server's start-up time.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.kubelets.lifecycle import LifecycleConfig
from gem_testbed.kubelets.processes import PORTS_ANNOTATION, ProcessConfig

SERVER = textwrap.dedent(
    """
    import http.server, os, sys
    print("starting as", os.environ["POD_NAME"], "in", os.environ["POD_NAMESPACE"], flush=True)
    port, flag = int(sys.argv[2]), sys.argv[3]  # argv: --port PORT FLAG
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path != "/readyz" or os.path.exists(flag)
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(os.environ["POD_NAME"].encode())
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    config = ProcessConfig(root=tmp_path / "kubelet", max_processes=2, backoff_initial=0.2, backoff_max=0.5)
    with EmbeddedCluster(fleet="demo", lifecycle=LifecycleConfig(0, 0), run_pods=config) as running:
        yield running


def _pod(name: str, tmp_path: Path, *, inits: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    container = {
        "name": "server",
        "image": "gem-workloads",
        "command": ["python", str(script)],
        "args": ["--port", "8080", str(tmp_path / f"{name}.ready")],  # 8080 becomes the pod's own port
        "env": env,
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 0.2},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"gem.dev/kind": "rankingservice"}},
        "spec": {"containers": [container], "initContainers": inits or [], "terminationGracePeriodSeconds": 2, **spec},
    }


def _ready(pod: dict[str, Any] | None) -> bool:
    conds = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:  # not listening yet
        return 0, str(e)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _server_pid(cluster: EmbeddedCluster, name: str) -> int:
    run = next(r for r in cluster.processes._runs.values() if r.key == ("default", name))  # type: ignore[union-attr]
    proc = run.containers[0].proc
    assert proc is not None
    return proc.pid


def test_pod_runs_turns_ready_after_readyz_restarts_after_crash_and_dies_on_delete(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    cluster.apply(_pod("web", tmp_path))
    pod = cluster.wait_for(
        lambda: (p := cluster.get("v1", "Pod", "web", "default")) and PORTS_ANNOTATION in p["metadata"].get(
            "annotations", {}) and (p.get("status") or {}).get("phase") == "Running" and p,
    )  # fmt: skip
    port = json.loads(pod["metadata"]["annotations"][PORTS_ANNOTATION])["http"]
    assert pod["status"]["podIP"] == "127.0.0.1" and port != 8080
    assert cluster.wait_for(lambda: _get(f"http://127.0.0.1:{port}/")[0] == 200, timeout=15)
    assert _get(f"http://127.0.0.1:{port}/")[1] == "web"  # Downward API: metadata.name
    time.sleep(0.6)
    assert not _ready(cluster.get("v1", "Pod", "web", "default")), "Ready before /readyz answered 200"
    (tmp_path / "web.ready").touch()
    cluster.wait_for(lambda: _ready(cluster.get("v1", "Pod", "web", "default")), timeout=10)

    # The output is what `kubectl logs` shows (not the pod's JSON).
    status, text = _get(f"{cluster.url}/api/v1/namespaces/default/pods/web/log")
    assert status == 200 and text.startswith("starting as web in default"), text

    pid = _server_pid(cluster, "web")
    os.kill(pid, signal.SIGKILL)
    pod = cluster.wait_for(
        lambda: (p := cluster.get("v1", "Pod", "web", "default")) and _ready(p)
        and p["status"]["containerStatuses"][0]["restartCount"] == 1 and p,
        timeout=15,
    )  # fmt: skip
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 128 + signal.SIGKILL and last["reason"] == "Error"
    new_pid = _server_pid(cluster, "web")
    assert new_pid != pid

    cluster.delete("v1", "Pod", "web", "default")
    cluster.wait_for(lambda: not _pid_alive(new_pid), timeout=10)


def test_failing_init_container_keeps_the_pod_from_starting_and_reports_why(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    fail = {
        "name": "model-loader",
        "image": "gem-workloads",
        "command": ["python", "-c"],
        # The path argument is rewritten to the container's own termination-log file.
        "args": [
            "import sys; open(sys.argv[2], 'w').write('origin unreachable: no such bucket'); sys.exit(3)",
            "--termination-log",
            "/dev/termination-log",
        ],
    }
    cluster.apply(_pod("blocked", tmp_path, inits=[fail]))
    pod = cluster.wait_for(
        lambda: (p := cluster.get("v1", "Pod", "blocked", "default"))
        and (p.get("status") or {}).get("initContainerStatuses")
        and p["status"]["initContainerStatuses"][0]["restartCount"] >= 1 and p,
        timeout=15,
    )  # fmt: skip
    init = pod["status"]["initContainerStatuses"][0]
    assert init["lastState"]["terminated"]["exitCode"] == 3
    assert "origin unreachable: no such bucket" in init["lastState"]["terminated"]["message"]
    assert pod["status"]["phase"] == "Pending"
    assert not _ready(pod) and pod["status"]["containerStatuses"][0]["state"].get("waiting")
    initialized = next(c for c in pod["status"]["conditions"] if c["type"] == "Initialized")
    assert initialized["status"] == "False" and "model-loader" in initialized["message"]


def test_process_bound_is_a_clear_error_and_simulated_pods_have_no_logs(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        cluster.apply(_pod(name, tmp_path))
    pod = cluster.wait_for(
        lambda: (p := cluster.get("v1", "Pod", "c", "default")) and (p.get("status") or {}).get("reason") and p
    )
    assert pod["status"]["reason"] == "ProcessLimit"
    assert "at most 2 pods" in pod["status"]["message"] and "maxReplicas" in pod["status"]["message"]

    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sim", "namespace": "default"},
                   "spec": {"containers": [{"name": "main", "image": "busybox"}]}})  # fmt: skip
    status, text = _get(f"{cluster.url}/api/v1/namespaces/default/pods/sim/log")
    assert status == 400 and "simulated" in text and "no logs" in text
    assert _get(f"{cluster.url}/api/v1/namespaces/default/pods/nope/log")[0] == 404
    assert sys.executable  # the containers' `python` is this interpreter
