"""Loader throughput against an nginx origin that caps every connection at R bytes/s.

Prints ratios against baselines measured in the same run:
  * gem-load with 1, 4, 8, 16, 32 streams vs the ideal N*R (a steady cap: all it allows), plus
    one unthrottled run that shows this machine's ceiling;
  * boto3's default `download_file` (TransferConfig defaults) reading the same files through the
    same limiter, with nginx acting as a path-style S3 endpoint (HEAD + ranged GETs with If-Match);
  * a warm node-cache load vs plain `cat` copying the same files;
  * projected time to load 1 TB at 25 and 100 Gb/s from the measured efficiency.

The per-connection cap is nginx's stream proxy (`proxy_download_rate`, libnginx-mod-stream) in
front of an unthrottled nginx http server: http's `limit_rate` counts per request and lets the
first R bytes of every response through at once, so it would flatter ranged clients.

    python bench/loader_throughput.py --size 2GiB --rate-mb 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from loader_origin import free_port, stream_buffer, wait_port  # bench/ is on sys.path when this runs as a script

from gem_workloads.loader.cache import NodeCache
from gem_workloads.loader.manifest import build_manifest, parse_size
from gem_workloads.loader.progress import NullReporter
from gem_workloads.loader.pull import PullConfig, pull

DIRECT_IO = [True]  # set from --no-direct-io
NGINX = "/usr/sbin/nginx"
STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


class Sampler(NullReporter):
    """Records (time, cumulative bytes) so steady-state throughput can be read off a window."""

    def __init__(self) -> None:
        super().__init__()
        self.t0 = time.monotonic()
        self.done = 0
        self.samples: list[tuple[float, int]] = [(0.0, 0)]
        self.lock = threading.Lock()
        self.cpu0 = _cpu()
        self.cpu = 0.0
        self.completed: float | None = None  # seconds until pull() returned: fsync, renames, marker

    def stop(self) -> None:
        self.cpu = _cpu() - self.cpu0

    def cpu_per_gb(self) -> float:
        """This process's CPU seconds (all threads) per GB moved: the cost a busy node pays."""
        return self.cpu / max(self.done / 1e9, 1e-9)

    def advance(self, nbytes: int, source: str) -> None:
        with self.lock:
            self.done += nbytes
            self.samples.append((time.monotonic() - self.t0, self.done))

    def rates(self) -> tuple[float, float]:
        """(end-to-end B/s up to the last byte, seconds)."""
        t_end, b_end = self.samples[-1]
        return b_end / max(t_end, 1e-9), t_end


def make_data(root: Path, size: int, files: int) -> None:
    """Incompressible files; one random block reused with a counter so every part differs."""
    root.mkdir(parents=True)
    block = os.urandom(4 << 20)
    per = size // files
    for i in range(files):
        with open(root / f"shard-{i:03d}.bin", "wb") as f:
            written = 0
            while written < per:
                n = min(len(block), per - written)
                f.write((i * 10**9 + written).to_bytes(8, "little") + block[8:n])
                written += n


def start_nginx(work: Path, data: Path, rate: int) -> tuple[subprocess.Popen[bytes], int, int]:
    http_port, capped_port = free_port(), free_port()
    temps = "\n".join(f"  {k}_temp_path {work}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = work / "nginx.conf"
    conf.write_text(
        f"""
load_module {STREAM_MODULE};
daemon off;
user root;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  default_type application/octet-stream;
  sendfile on;
  access_log off;
  keepalive_requests 1000000;
{temps}
  server {{
    listen 127.0.0.1:{http_port};
    location /bucket/ {{ alias {data}/; }}
    location / {{ root {data}; }}
  }}
}}
stream {{
  server {{
    listen 127.0.0.1:{capped_port};
    proxy_pass 127.0.0.1:{http_port};
    proxy_download_rate {rate};
    proxy_buffer_size {stream_buffer(rate)};
  }}
}}
"""
    )
    proc = subprocess.Popen([NGINX, "-p", str(work), "-e", str(work / "error.log"), "-c", str(conf)])
    wait_port(http_port)
    wait_port(capped_port)
    return proc, http_port, capped_port


async def loader_run(url: str, dest: Path, streams: int, part: int | None, max_s: float) -> Sampler:
    shutil.rmtree(dest, ignore_errors=True)
    sampler = Sampler()
    task = asyncio.create_task(
        pull(url, dest, cfg=PullConfig(streams=streams, request_size=part, direct_io=DIRECT_IO[0]), reporter=sampler)
    )
    try:
        await asyncio.wait_for(asyncio.shield(task), max_s)
        sampler.completed = time.monotonic() - sampler.t0
    except TimeoutError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    sampler.stop()
    shutil.rmtree(dest, ignore_errors=True)
    return sampler


def boto3_run(endpoint: str, files: list[str], dest: Path, max_s: float) -> Sampler:
    import boto3
    from botocore.config import Config

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", config=Config(s3={"addressing_style": "path"})
    )
    dest.mkdir(parents=True, exist_ok=True)
    sampler = Sampler()
    for name in files:
        if time.monotonic() - sampler.t0 > max_s:
            break
        client.download_file("bucket", name, str(dest / name), Callback=lambda n: sampler.advance(n, "boto3"))
    sampler.stop()
    shutil.rmtree(dest, ignore_errors=True)
    return sampler


def cat_copy(data: Path, files: list[str], dest: Path | None) -> float:
    """`cat` the files into dest and fsync them (as the loader does), or to /dev/null when dest is None."""
    if dest is None:
        script = "cat " + " ".join(str(data / f) for f in files) + " > /dev/null"
    else:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        script = " && ".join(f"cat {data / f} > {dest / f}" for f in files)
        script += " && sync " + " ".join(str(dest / f) for f in files)
    t = time.monotonic()
    subprocess.run(["sh", "-c", script], check=True)
    return time.monotonic() - t


async def cache_run(url: str, cache: NodeCache, dest: Path, streams: int) -> float:
    shutil.rmtree(dest, ignore_errors=True)
    t = time.monotonic()
    summary = await pull(url, dest, cfg=PullConfig(streams=streams), cache=cache)
    elapsed = time.monotonic() - t
    assert summary["fetchedBytes"] == 0, "the warm run must come from the cache"
    return elapsed


def done_s(s: Sampler) -> str:
    """Time until the model was complete (marker written), or '-' for a run stopped at --max-seconds."""
    return f"{s.completed:7.1f}s" if s.completed is not None else "       -"


def fmt(bps: float) -> str:
    return f"{bps / 1e6:8.1f} MB/s"


async def main_async(args: argparse.Namespace) -> None:
    size, rate = parse_size(args.size, "--size"), int(args.rate_mb * 1e6)
    streams = [int(s) for s in args.streams.split(",")]
    work = Path(tempfile.mkdtemp(prefix="gem-load-bench-", dir=args.workdir))
    data = work / "data"
    proc = None
    try:
        t = time.monotonic()
        make_data(data, size, args.files)
        manifest = build_manifest(data, parse_size(args.part_size, "--part-size"), workers=2)
        (data / "manifest.json").write_text(manifest.to_json())
        files = [f.path for f in manifest.files]
        print(
            f"data: {len(files)} files, {manifest.total_bytes / 1e9:.2f} GB, part {args.part_size}; "
            f"loader direct I/O {'on' if DIRECT_IO[0] else 'off'}; "
            f"prepared in {time.monotonic() - t:.1f}s; R = {args.rate_mb:g} MB/s per connection"
        )
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start (shared with others)")
        proc, http_port, capped_port = start_nginx(work, data, rate)
        capped, direct = f"http://127.0.0.1:{capped_port}", f"http://127.0.0.1:{http_port}"

        print("\n  streams    ideal N*R      measured   vs N*R  seconds  CPU s/GB  complete")
        results: dict[int, float] = {}
        effs: list[float] = []
        for n in streams:
            s = await loader_run(capped, work / "dst", n, None, args.max_seconds)
            e2e, secs = s.rates()
            results[n] = e2e
            effs.append(e2e / (n * rate))
            print(
                f"  {n:7d}  {fmt(n * rate)}  {fmt(e2e)}  {effs[-1]:6.1%}"
                f"  {secs:7.1f}  {s.cpu_per_gb():8.2f}  {done_s(s)}"
            )
        s = await loader_run(direct, work / "dst", max(streams), None, args.max_seconds)
        ceiling, secs = s.rates()
        ceiling_cpu = s.cpu_per_gb()
        print(
            f"  {max(streams):7d}  {'unthrottled':>13}  {fmt(ceiling)}  {'':>6}  {secs:7.1f}"
            f"  {ceiling_cpu:8.2f}  {done_s(s)}"
            "   <- this machine's ceiling (loopback, SHA-256, page cache on 2 shared cores)"
        )

        b = boto3_run(capped, files, work / "boto3", args.max_seconds)
        b_e2e, b_secs = b.rates()
        default_n = PullConfig().streams
        ours = results.get(default_n, max(results.values()))
        best_n = max(results, key=lambda k: results[k])
        print(
            f"\n  boto3 download_file (default TransferConfig: 10 threads, 8 MiB parts): {fmt(b_e2e)} "
            f"over {b_secs:.1f}s ({b_e2e / (10 * rate):.0%} of what 10 connections may read), "
            f"{b.cpu_per_gb():.2f} CPU s/GB (no hashing)"
        )
        print(
            f"  gem-load {default_n} streams (default) / boto3: {ours / b_e2e:5.2f}x;  "
            f"best ({best_n} streams): {results[best_n] / b_e2e:5.2f}x"
        )

        cache = NodeCache(work / "cache", high=10 * size, low=5 * size)
        await pull(direct, work / "fill", cfg=PullConfig(streams=8), cache=cache)
        shutil.rmtree(work / "fill")
        warm = min([await cache_run(direct, cache, work / "warm", default_n) for _ in range(2)])
        cat = min(cat_copy(data, files, work / "cat") for _ in range(2))
        cat_null = min(cat_copy(data, files, None) for _ in range(2))
        linked = min(
            [
                await cache_run(
                    direct, NodeCache(cache.root, cache.high, cache.low, link=True), work / "warm", default_n
                )
                for _ in range(2)
            ]
        )
        gb = manifest.total_bytes / 1e9
        print(
            f"\n  warm node-cache load (copy + fsync into DEST) {warm:.2f}s ({gb / warm:.2f} GB/s)\n"
            f"    vs cat into files + sync {cat:.2f}s ({gb / cat:.2f} GB/s): {warm / cat:.2f}x\n"
            f"    vs cat > /dev/null (read only) {cat_null:.2f}s ({gb / cat_null:.2f} GB/s): "
            f"{warm / cat_null:.2f}x\n"
            f"  warm node-cache load with --cache-link (hard links, same filesystem): {linked:.2f}s"
        )

        unlimited = [e for n, e in zip(streams, effs, strict=True) if n * rate < 0.8 * ceiling]
        eff = min(unlimited) if unlimited else min(effs)
        print(f"\n  efficiency used for projection: {eff:.1%} (worst N with N*R under 80% of the ceiling)")
        for gbps in (25, 100):
            line = gbps * 1e9 / 8
            print(f"  {gbps} Gb/s needs about {line / 1e9 * ceiling_cpu:.0f} cores at {ceiling_cpu:.2f} CPU s/GB")
            print(
                f"  1 TB at {gbps:3d} Gb/s: ideal {1e12 / line:6.0f}s, projected {1e12 / (line * eff):6.0f}s "
                f"({1e12 / (line * eff) / 60:.1f} min)"
            )
        print(f"\nload average at end: {os.getloadavg()[0]:.1f}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="2GiB", help="total bytes of the generated model (default 2GiB)")
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--rate-mb", type=float, default=20.0, help="per-connection cap R in MB/s (default 20)")
    p.add_argument("--streams", default="1,4,8,16,32")
    p.add_argument("--part-size", default="16MiB")
    p.add_argument("--max-seconds", type=float, default=20.0, help="cap on each run (throughput is a rate)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--no-direct-io", action="store_true", help="loader writes through the page cache")
    args = p.parse_args()
    DIRECT_IO[0] = not args.no_direct_io
    for path in (NGINX, STREAM_MODULE):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: apt-get install nginx-light libnginx-mod-stream")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
