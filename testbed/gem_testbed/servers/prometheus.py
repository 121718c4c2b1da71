"""A real Prometheus (Debian's ``/usr/bin/prometheus``) on loopback, scraping the embedded cluster.

It discovers its targets through ``file_sd_configs`` that `ClusterNetwork` writes from the pods
(the role a PodMonitor and the dcgm-exporter ServiceMonitor play in a cluster): job ``dcgm`` (the
node exporters' ``DCGM_FI_PROF_SM_ACTIVE``) and job ``pods`` (each Ready ranking server's own
``/metrics``: queue depth, request counter, latency histogram), every `scrape_interval` seconds.
``honor_labels`` keeps the exporters' ``namespace``/``pod`` labels as the operator's PromQL reads
them. The operator reaches it through its normal Prometheus source, at `url`.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from gem_testbed.kubelets.pod_config import LOOPBACK
from gem_testbed.kubelets.processes import free_port
from gem_testbed.servers.local_server import LocalServer

PROMETHEUS = "/usr/bin/prometheus"


class PrometheusError(RuntimeError):
    """Prometheus is missing or did not start (the message says how to fix it)."""


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or (PROMETHEUS if Path(PROMETHEUS).exists() else None)
    if found is None:
        raise PrometheusError("prometheus is not installed: `apt-get install -y prometheus` (Debian's package)")
    return found


class PrometheusServer(LocalServer):
    """Start with `start()` (or `with`); `stop()` ends the process and removes its data."""

    def __init__(self, sd_dir: Path, *, scrape_interval: float = 5.0, work_dir: Path | None = None) -> None:
        self.sd_dir = Path(sd_dir)
        self.scrape_interval = scrape_interval
        super().__init__(work_dir, "gem-sim-prometheus-")

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def config(self) -> dict[str, object]:
        interval = f"{self.scrape_interval:g}s"
        jobs = []
        for job in ("dcgm", "pods"):
            jobs.append(
                {
                    "job_name": job,
                    "honor_labels": True,
                    "scrape_interval": interval,
                    "scrape_timeout": f"{min(self.scrape_interval, 4.0):g}s",
                    "file_sd_configs": [{"files": [str(self.sd_dir / f"{job}.json")], "refresh_interval": "1s"}],
                }
            )
        return {"global": {"scrape_interval": interval, "evaluation_interval": interval}, "scrape_configs": jobs}

    def start(self, timeout: float = 30.0) -> None:
        binary = prometheus_binary()
        config = self.work_dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self.port = free_port()
        log = (self.work_dir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.work_dir / 'data'}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
                "--storage.tsdb.retention.time=2h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.work_dir / "prometheus.log").read_text(errors="replace")[-1500:]
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusError(f"prometheus did not become ready within {timeout:g} s")


__all__ = ["PrometheusError", "PrometheusServer", "prometheus_binary"]
