"""The origin for bench/loader_peers.py: moto's S3 server with ranged GETs served from the range
only, behind nginx (a keep-alive http proxy, then the stream proxy capping each connection), and
a model of safetensors files with random tensors."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

NGINX = "/usr/sbin/nginx"
STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"


# ---------------------------------------------------------------------------------------------
# moto, serving a ranged GET from the range only


def patch_moto_ranges() -> None:
    """Make moto read only the requested range of an object for a ranged GET.

    moto's get_object reads the whole value (`key.value`) and its range handler slices it, so a
    16 MiB range of a 128 MiB object reads 128 MiB: at 32 streams the origin, not the clients,
    would be measured. During a ranged GET `key.value` becomes a lazy view whose slice reads
    just that range from the key's buffer.
    """
    import importlib

    models: Any = importlib.import_module("moto.s3.models")
    responses: Any = importlib.import_module("moto.s3.responses")

    local = threading.local()

    class RangeValue:
        def __init__(self, key: Any) -> None:
            self.key = key

        def __len__(self) -> int:
            return int(self.key.size)

        def __bool__(self) -> bool:
            return True

        def __getitem__(self, s: slice) -> bytes:
            start, stop, _ = s.indices(len(self))
            with self.key.lock:
                self.key._value_buffer.seek(start)
                return bytes(self.key._value_buffer.read(max(0, stop - start)))

    plain = models.FakeKey.value

    def value(self: Any) -> Any:
        return RangeValue(self) if getattr(local, "ranged", False) else plain.fget(self)

    models.FakeKey.value = property(value, plain.fset)
    get_object = responses.S3Response.get_object
    handle_range = responses.S3Response._handle_range_header

    def ranged_get_object(self: Any) -> Any:
        local.ranged = bool(self.headers.get("range"))
        try:
            return get_object(self)
        finally:
            local.ranged = False

    def ranged_handle(self: Any, request: Any, headers: Any, content: Any) -> Any:
        status, headers, body = handle_range(self, request, headers, content)
        if isinstance(body, RangeValue):  # a Range moto declined (several ranges...): whole object
            body = body[:]
        return status, headers, body

    responses.S3Response.get_object = ranged_get_object
    responses.S3Response._handle_range_header = ranged_handle


def serve_moto(port: int) -> None:
    from moto.server import ThreadedMotoServer

    patch_moto_ranges()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        while True:
            time.sleep(3600)
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------
# the model


def write_safetensors(path: Path, tensor_bytes: list[int], seed: int) -> None:
    """A valid safetensors file of F16 tensors with random contents (incompressible)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for i, n in enumerate(tensor_bytes):
        header[f"layer.{seed}.{i}.weight"] = {"dtype": "F16", "shape": [n // 2], "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        block = os.urandom(4 << 20)
        for i, n in enumerate(tensor_bytes):
            written = 0
            while written < n:
                k = min(len(block), n - written)
                f.write((seed * 10**9 + i * 10**6 + written).to_bytes(8, "little") + block[8:k])
                written += k


def make_model(root: Path, size: int, files: int) -> list[str]:
    """`files` shards of about size/files bytes, tensors of 4-40 MiB (a transformer's mix)."""
    root.mkdir(parents=True)
    names = []
    per = size // files
    mib = 1 << 20
    for i in range(files):
        sizes, left, k = [], per, 0
        while left > 0:
            n = min(left, (4 + (k * 7) % 37) * mib)
            n -= n % 2
            if n <= 0:
                break
            sizes.append(n)
            left -= n
            k += 1
        name = f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        write_safetensors(root / name, sizes, i)
        names.append(name)
    return names


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port}")


def stream_buffer(rate: int) -> int:
    """The stream proxy's buffer that makes `proxy_download_rate` a steady cap, as on a shaped link.

    After each read of n bytes the stream proxy waits n / rate, in whole milliseconds. With its
    default 16 KiB buffer that wait rounds to 0 ms at 20 MB/s and only its other check binds,
    R x (whole seconds since the accept + 1) bytes in all: a first-second burst, idle time paid
    back later, and runs that end on a whole-second tick, up to a second apart for the same
    client. A buffer of `rate` x 16 ms makes every read wait its own bytes' time.
    """
    return max(16384, rate * 16 // 1000)


def start_nginx(work: Path, upstream: int, rate: int, data: Path) -> tuple[subprocess.Popen[bytes], int, int, Path]:
    """nginx's stream proxy capping every TCP connection at `rate` bytes/s (one log line per
    connection), in front of an nginx http proxy to moto that keeps client connections alive; and
    an uncapped http server of the model's directory (the HTTP source's cost).

    The cap is a steady `rate` (see stream_buffer). The http hop's 256 KiB buffers (4 KiB by
    default) cut nginx's CPU from about 3 to 1.3 CPU-s per GB, on the cores the clients use."""
    port, http_port, front = free_port(), free_port(), free_port()
    temps = "\n".join(f"  {k}_temp_path {work}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    log = work / "conns.log"
    conf = work / "nginx.conf"
    conf.write_text(
        f"""
load_module {STREAM_MODULE};
daemon off;
{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  default_type application/octet-stream;
  sendfile on;
  access_log off;
  keepalive_requests 1000000;
{temps}
  server {{
    listen 127.0.0.1:{http_port};
    root {data};
  }}
  # Keeps each client connection alive across requests, as S3 does (moto's werkzeug closes every
  # one: each request would cost a new connection, and the connection counts would mean nothing).
  server {{
    listen 127.0.0.1:{front} backlog=1024;
    client_max_body_size 0;
    location / {{
      proxy_pass http://127.0.0.1:{upstream};
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_buffer_size 256k;
      proxy_buffers 4 256k;
      proxy_busy_buffers_size 256k;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }}
  }}
}}
stream {{
  log_format c '$session_time $bytes_sent $msec';
  access_log {log} c buffer=4k flush=100ms;
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    proxy_pass 127.0.0.1:{front};
    proxy_download_rate {rate};
    proxy_buffer_size {stream_buffer(rate)};
  }}
}}
"""
    )
    log.touch()
    proc = subprocess.Popen([NGINX, "-p", str(work), "-e", str(work / "error.log"), "-c", str(conf)])
    try:
        for p in (port, http_port, front):
            wait_port(p)
    except RuntimeError:
        proc.kill()
        errors = (work / "error.log").read_text()[-800:] if (work / "error.log").exists() else ""
        raise RuntimeError(f"nginx did not start ({conf}): {errors}") from None
    return proc, port, http_port, log


def log_lines(log: Path) -> int:
    return log.read_bytes().count(b"\n")


def conn_starts(log: Path, skip: int) -> list[tuple[float, int]]:
    """(wall-clock time nginx accepted it, bytes it sent) per connection logged after the first
    `skip` lines (logged at close: `$msec` is the end, less `$session_time`)."""
    out = []
    for line in log.read_text().splitlines()[skip:]:
        session, sent, end = line.split()
        out.append((float(end) - float(session), int(sent)))
    return out
