"""A model origin served over HTTP by Debian's nginx on loopback, each request rate-capped.

Pods of the process kubelet pull their model with the real ``gem-load pull``. Pulling from a
local directory takes milliseconds, which makes pod start look cheaper than it is in a cluster,
where the bytes cross a network from an object store. nginx in front of the origin directory
(ranged GETs, keep-alive, nginx's ``limit_rate`` on every request) gives the pull a realistic
shape: the loader's streams, part sizes and retries all run over HTTP, and each ranged GET of P
bytes takes about P / rate - 1 seconds (nginx lets a request's first second of bytes go at once).
A low rate stands for a larger model than the tiny preset. `url` is what the kubelet rewrites the
model's URI to.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from gem_testbed.kubelets.pod_config import LOOPBACK
from gem_testbed.kubelets.processes import free_port
from gem_testbed.servers.local_server import LocalServer

NGINX = "/usr/sbin/nginx"
_TEMP_DIRS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


class OriginError(RuntimeError):
    """nginx is missing or did not start (the message says how to fix it)."""


def nginx_binary() -> str:
    found = shutil.which("nginx") or (NGINX if Path(NGINX).exists() else None)
    if found is None:
        raise OriginError("nginx is not installed: `apt-get install -y nginx-light` (Debian's package)")
    return found


def parse_rate(text: str) -> int:
    """``20m`` / ``512k`` / ``1048576`` (bytes per second, nginx's suffixes) -> bytes per second."""
    value = text.strip().lower()
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3}.get(value[-1:], 1)
    digits = value[:-1] if scale != 1 else value
    try:
        rate = int(digits)
    except ValueError:
        raise OriginError(f"origin rate {text!r}: use bytes per second, e.g. 20m, 512k or 0 (uncapped)") from None
    if rate < 0:
        raise OriginError(f"origin rate {text!r} is negative: use 0 for uncapped")
    return rate * scale


class NginxServer(LocalServer):
    """Debian's nginx on a free loopback port, configured by the subclass's `config()` (which may
    use `self.port` and `self.work_dir`, both set before it is called)."""

    def config(self) -> str:
        raise NotImplementedError

    def start(self, timeout: float = 15.0) -> None:
        binary = nginx_binary()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = self.work_dir / "nginx.conf"
        conf.write_text(self.config())
        err = self.work_dir / "error.log"
        self.proc = subprocess.Popen(
            [binary, "-p", str(self.work_dir), "-e", str(err), "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = err.read_text(errors="replace")[-1500:] if err.exists() else ""
                raise OriginError(f"nginx exited with {self.proc.returncode}:\n{tail}")
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise OriginError(f"nginx did not listen on {LOOPBACK}:{self.port} within {timeout:g} s")

    def requests(self) -> int:
        """Requests answered so far (lines of the access log)."""
        log = self.work_dir / "access.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def head(self) -> str:
        """The configuration every such server shares: one process in the foreground, files in work_dir."""
        temps = "\n".join(f"  {k}_temp_path {self.work_dir}/{k};" for k in _TEMP_DIRS)
        return f"""daemon off;
master_process off;
worker_processes 1;
pid {self.work_dir}/nginx.pid;
error_log {self.work_dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log {self.work_dir}/access.log;
{temps}
"""


class NginxOrigin(NginxServer):
    """Serve `root` at `url` with every request capped at `rate` bytes/s (0: uncapped)."""

    def __init__(self, root: Path, *, rate: int, work_dir: Path | None = None) -> None:
        self.root = Path(root).resolve()
        self.rate = rate
        super().__init__(work_dir, "gem-sim-origin-")

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def config(self) -> str:
        return f"""{self.head()}
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  server {{
    listen {LOOPBACK}:{self.port};
    location / {{ root {self.root}; limit_rate {self.rate}; }}
  }}
}}
"""


__all__ = ["NginxOrigin", "NginxServer", "OriginError", "nginx_binary", "parse_rate"]
