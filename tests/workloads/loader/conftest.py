"""Real servers for the loader tests: nginx (Debian's binary) and moto's S3, on loopback only."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gem_workloads.loader.manifest import build_manifest

NGINX = "/usr/sbin/nginx"
PART = 64 * 1024
# The path of the request Nginx.requests sends so that every earlier request is in the log.
BARRIER = "__access_log_barrier__"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port}")


def make_model(root: Path, sizes: dict[str, int], seed: int = 1, algorithm: str = "sha256") -> Path:
    """Random files plus manifest.json (64 KiB parts, so small models still have many parts).

    SHA-256 (the version-1 format) unless asked: the tests written for it keep checking the
    format every existing manifest has; test_algorithms covers BLAKE3, the default for new ones."""
    root.mkdir(parents=True, exist_ok=True)
    rnd = __import__("random").Random(seed)
    for rel, size in sizes.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rnd.randbytes(size))
    (root / "manifest.json").write_text(build_manifest(root, PART, algorithm=algorithm).to_json())
    return root


def same_tree(a: Path, b: Path, rels: list[str]) -> bool:
    return all((a / r).read_bytes() == (b / r).read_bytes() for r in rels)


@dataclass
class Nginx:
    url: str
    root: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def requests(self) -> list[dict[str, Any]]:
        """Access-log lines as dicts: method, uri, status, bytes, range, connection serial, the time
        the request ended (t), its duration (rt) and its connection's age then (ct), in seconds.

        nginx logs a request after it has sent the last byte, so a client can hold the whole
        response before its line is written. The worker is one event loop: once it has logged a
        request of our own, sent after every response the test read, it has logged those too."""
        barrier = f"/{BARRIER}/{uuid.uuid4().hex}"
        if self.proc.poll() is None:
            conn = http.client.HTTPConnection(urlsplit(self.url).netloc, timeout=10)
            try:
                conn.request("GET", barrier)
                conn.getresponse().read()
            finally:
                conn.close()
        end = time.monotonic() + 10
        while True:
            lines = [json.loads(line) for line in self.log.read_text().splitlines()]
            if self.proc.poll() is not None or any(r["u"] == barrier for r in lines):
                return [r for r in lines if not r["u"].startswith(f"/{BARRIER}/")]
            if time.monotonic() > end:
                raise RuntimeError(f"nginx never logged {barrier} in {self.log}")
            time.sleep(0.01)

    def model_gets(self) -> list[dict[str, Any]]:
        return [r for r in self.requests() if r["m"] == "GET" and not r["u"].endswith("manifest.json")]


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Callable[..., Nginx]]:
    """Factory: start nginx serving a directory, optionally at `rate` bytes/s per connection."""
    if not os.path.exists(NGINX):
        pytest.skip(f"{NGINX} is missing (apt-get install nginx-light) - HTTP origin tests need it")
    procs: list[subprocess.Popen[bytes]] = []

    def start(root: Path, rate: str = "0", prefix: str = "/") -> Nginx:
        d = tmp_path / f"nginx-{len(procs)}"
        d.mkdir()
        port = free_port()
        conf = d / "nginx.conf"
        temps = "\n".join(f"  {k}_temp_path {d}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        alias = f"alias {root}/;" if prefix != "/" else f"root {root};"
        conf.write_text(
            f"""
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 512; }}
http {{
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  log_format gl escape=json '{{"m":"$request_method","u":"$uri","s":$status,'
                            '"b":$body_bytes_sent,"r":"$http_range","c":$connection,'
                            '"t":$msec,"rt":$request_time,"ct":$connection_time}}';
  access_log {d}/access.log gl;
{temps}
  server {{
    listen 127.0.0.1:{port};
    location {prefix} {{ {alias} limit_rate {rate}; }}
  }}
}}
"""
        )
        proc = subprocess.Popen([NGINX, "-p", str(d), "-e", str(d / "error.log"), "-c", str(conf)])
        procs.append(proc)
        wait_port(port)
        (d / "access.log").touch()
        return Nginx(url=f"http://127.0.0.1:{port}{prefix.rstrip('/')}", root=root, log=d / "access.log", proc=proc)

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """Run `python -m gem_workloads.loader` as a separate process, as an init container would."""
    return subprocess.run(
        [sys.executable, "-m", "gem_workloads.loader", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        **kw,
    )


def cli_popen(*args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gem_workloads.loader", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def s3_endpoint_env(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """Point obstore's S3 client at a loopback endpoint with dummy credentials."""
    for k, v in {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def helpers() -> Any:
    """The helpers above, as a fixture (tests run with --import-mode=importlib)."""

    class H:
        PART = PART
        make_model = staticmethod(make_model)
        same_tree = staticmethod(same_tree)
        cli = staticmethod(cli)
        cli_popen = staticmethod(cli_popen)
        free_port = staticmethod(free_port)
        wait_port = staticmethod(wait_port)
        s3_endpoint_env = staticmethod(s3_endpoint_env)
        rmtree = staticmethod(shutil.rmtree)

    return H
