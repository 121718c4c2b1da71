"""The socket receive path: ranged GETs read into the caller's buffer, against real servers
(nginx, aiohttp, moto's S3), including the shapes of response a library client would hide."""

from __future__ import annotations

import asyncio
import mmap
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gem_workloads.loader.errors import ObjectChanged, SourceError, UsageError
from gem_workloads.loader.pull import PullConfig, pull
from gem_workloads.loader.rawhttp import ConnectionPool
from gem_workloads.loader.sources import HttpSource, ObjectInfo, ObstoreSource, open_source

SIZES = {"model.bin": 1_000_000, "tok.json": 1234}


@pytest.mark.servers
async def test_http_ranges_land_in_the_callers_buffer_on_one_connection(
    tmp_path: Path, helpers: Any, nginx: Any
) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    n = nginx(src)
    source = HttpSource(n.url, streams=2)
    try:
        info = await source.head("model.bin")
        buf = memoryview(mmap.mmap(-1, 1 << 20))
        whole = (src / "model.bin").read_bytes()
        for a, b in [(0, 65536), (65536, 300_001), (999_000, 1_000_000)]:
            got = await source.read_range("model.bin", a, b, info, buf)
            assert isinstance(got, memoryview) and got.obj is buf.obj  # no copy: the stream's own buffer
            assert bytes(got) == whole[a:b]
        assert sum(len(c) for c in source._pool._idle.values()) == 1  # type: ignore[union-attr]  # kept alive
        # No buffer (or one too small): a fresh one, same bytes.
        assert bytes(await source.read_range("model.bin", 10, 70_000, info, None)) == whole[10:70_000]
    finally:
        await source.close()
    assert [g["s"] for g in n.model_gets()] == [206] * 4


def _odd_origin(body: bytes) -> web.Application:
    """Chunked, close-delimited, redirected and truncated answers to ranged GETs."""

    def ranged(request: web.Request) -> tuple[int, bytes]:
        a, _, b = request.headers["Range"].removeprefix("bytes=").partition("-")
        return int(a), body[int(a) : int(b) + 1]

    async def chunked(request: web.Request) -> web.StreamResponse:
        a, part = ranged(request)
        resp = web.StreamResponse(status=206, headers={"Content-Range": f"bytes {a}-{a + len(part) - 1}/{len(body)}"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(0, len(part), 7000):
            await resp.write(part[i : i + 7000])
        await resp.write_eof()
        return resp

    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect("/chunked/x")

    async def truncated(request: web.Request) -> web.StreamResponse:
        _, part = ranged(request)
        resp = web.StreamResponse(status=206, headers={"Content-Length": str(len(part))})
        await resp.prepare(request)
        await resp.write(part[: len(part) // 2])
        assert request.transport is not None
        request.transport.close()
        return resp

    async def missing(request: web.Request) -> web.StreamResponse:
        return web.Response(status=503, text="<Error><Code>SlowDown</Code><Message>Reduce</Message></Error>")

    app = web.Application()
    app.router.add_get("/chunked/{p:.*}", chunked)
    app.router.add_get("/redirect/{p:.*}", redirect)
    app.router.add_get("/truncated/{p:.*}", truncated)
    app.router.add_get("/busy/{p:.*}", missing)
    return app


def _close_delimited_server(body: bytes) -> tuple[int, threading.Thread]:
    """HTTP/1.0-style: no Content-Length, the body ends when the server closes."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        conn, _ = srv.accept()
        with conn, srv:
            req = b""
            while b"\r\n\r\n" not in req:
                req += conn.recv(4096)
            rng = next(ln for ln in req.decode().split("\r\n") if ln.lower().startswith("range:"))
            a, _, b = rng.split("=", 1)[1].partition("-")
            part = body[int(a) : int(b) + 1]
            conn.sendall(f"HTTP/1.0 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{len(body)}\r\n\r\n".encode())
            conn.sendall(part)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return port, t


@pytest.mark.servers
async def test_chunked_redirected_close_delimited_and_broken_bodies(helpers: Any) -> None:
    body = os.urandom(200_000)
    info = ObjectInfo(size=len(body), etag=None)
    runner = web.AppRunner(_odd_origin(body), access_log=None)
    await runner.setup()
    port = helpers.free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    pool_src = HttpSource(f"http://127.0.0.1:{port}", streams=1)
    buf = memoryview(bytearray(1 << 18))
    try:
        got = await pool_src.read_range("chunked/x", 1000, 150_000, info, buf)
        assert got.obj is buf.obj and bytes(got) == body[1000:150_000]  # type: ignore[union-attr]
        assert bytes(await pool_src.read_range("redirect/x", 5, 60_000, info, buf)) == body[5:60_000]
        with pytest.raises(SourceError, match="closed by the server after 50000 of 100000 body bytes") as e:
            await pool_src.read_range("truncated/x", 0, 100_000, info, buf)
        assert e.value.transient
        with pytest.raises(SourceError, match="HTTP 503 SlowDown: Reduce") as e:
            await pool_src.read_range("busy/x", 0, 10, info, buf)
        assert e.value.transient and e.value.status == 503
        # Whatever went wrong before, the next GET gets a working connection.
        assert bytes(await pool_src.read_range("chunked/x", 0, 10, info, buf)) == body[:10]
    finally:
        await pool_src.close()
        await runner.cleanup()
    cport, t = _close_delimited_server(body)
    close_src = HttpSource(f"http://127.0.0.1:{cport}", streams=1)
    try:
        assert bytes(await close_src.read_range("f", 100, 90_000, info, buf)) == body[100:90_000]
    finally:
        await close_src.close()
    t.join(5)


@pytest.mark.servers
async def test_connect_ahead_opens_the_one_connection_every_request_then_uses(
    tmp_path: Path, helpers: Any, nginx: Any
) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    n = nginx(src)
    source = HttpSource(n.url, streams=1)
    try:
        await source.connect_ahead()
        await source.connect_ahead()  # one is idle: no second
        assert source._pool is not None and sum(len(c) for c in source._pool._idle.values()) == 1
        info = await source.head("model.bin")
        got = await source.read_range("model.bin", 0, 1000, info, memoryview(bytearray(1 << 16)))
        assert bytes(got) == (src / "model.bin").read_bytes()[:1000]
    finally:
        await source.close()
    # A failure is left to the first request: no error, nothing pooled.
    dead = HttpSource(f"http://127.0.0.1:{helpers.free_port()}/", streams=1)
    await dead.connect_ahead()
    assert dead._pool is not None and not any(dead._pool._idle.values())
    await dead.close()
    reqs = n.requests()
    assert len(reqs) == 2 and len({r["c"] for r in reqs}) == 1


@pytest.mark.servers
async def test_pull_opens_the_origins_connection_while_the_manifest_is_read(
    tmp_path: Path, helpers: Any, nginx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest takes 0.3 s to come: the connection the model's requests use was opened
    before the manifest was even asked for, and it is the only one they use (N = 1)."""
    import gem_workloads.loader.pull as pull_module

    real = pull_module.read_uri

    async def slow_manifest(uri: str, argument: str) -> bytes:
        await asyncio.sleep(0.3)
        return await real(uri, argument)

    monkeypatch.setattr(pull_module, "read_uri", slow_manifest)
    src = helpers.make_model(tmp_path / "src", SIZES)
    n = nginx(src)
    await pull(n.url, tmp_path / "dst", cfg=PullConfig(streams=1))
    assert helpers.same_tree(src, tmp_path / "dst", list(SIZES))
    reqs = n.requests()
    (manifest,) = [r for r in reqs if r["u"].endswith("manifest.json")]
    model = [r for r in reqs if not r["u"].endswith("manifest.json")]
    assert len({r["c"] for r in model}) == 1 and model[0]["c"] != manifest["c"]
    opened = model[0]["t"] - model[0]["ct"]
    asked = manifest["t"] - manifest["rt"]
    assert opened < asked - 0.2, (opened, asked)


@pytest.mark.servers
async def test_s3_connect_ahead_pools_a_connection_to_the_endpoint(moto_s3: Any) -> None:
    moto_s3.client.create_bucket(Bucket="ahead")
    moto_s3.client.put_object(Bucket="ahead", Key="m/model.bin", Body=b"x" * 1000)
    source = ObstoreSource("s3://ahead/m", streams=1)
    try:
        await source.connect_ahead()
        assert source._pool is not None
        ((key, conns),) = source._pool._idle.items()
        assert len(conns) == 1 and f"http://{key[1]}:{key[2]}" == moto_s3.endpoint
        # (moto's server closes each connection after a response; reuse is the nginx test's)
        info = await source.head("model.bin")
        assert bytes(await source.read_range("model.bin", 0, 10, info, None)) == b"x" * 10
    finally:
        await source.close()


@pytest.mark.servers
async def test_s3_ranges_through_presigned_urls_keep_if_match(moto_s3: Any) -> None:
    moto_s3.client.create_bucket(Bucket="raw")
    body = os.urandom(300_000)
    moto_s3.client.put_object(Bucket="raw", Key="m/model.bin", Body=body)
    source = ObstoreSource("s3://raw/m", streams=2)
    library = ObstoreSource("s3://raw/m", streams=2, socket_receive=False)
    try:
        info = await source.head("model.bin")
        buf = memoryview(mmap.mmap(-1, 1 << 18))
        got = await source.read_range("model.bin", 1000, 201_000, info, buf)
        assert isinstance(got, memoryview) and got.obj is buf.obj and bytes(got) == body[1000:201_000]
        assert source._pool is not None and {("GET", "model.bin"), ("HEAD", "model.bin")} <= set(source._signed)
        assert bytes(await library.read_range("model.bin", 1000, 201_000, info, buf)) == body[1000:201_000]
        assert library._pool is None
        moto_s3.client.put_object(Bucket="raw", Key="m/model.bin", Body=os.urandom(300_000))
        with pytest.raises(ObjectChanged):  # If-Match with the HEAD's ETag: 412, a changed object
            await source.read_range("model.bin", 0, 1000, info, buf)
        with pytest.raises(SourceError, match="not found") as e:
            gone = ObjectInfo(size=10, etag=None)
            await source.read_range("absent.bin", 0, 10, gone, buf)
        assert not e.value.transient
    finally:
        await source.close()
        await library.close()


@pytest.mark.servers
@pytest.mark.parametrize("receive", ["socket", "library"])
async def test_pull_from_s3_either_receive_mode(tmp_path: Path, helpers: Any, moto_s3: Any, receive: str) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    moto_s3.client.create_bucket(Bucket="pull")
    for rel in [*SIZES, "manifest.json"]:
        moto_s3.client.put_object(Bucket="pull", Key=f"gem/{rel}", Body=(src / rel).read_bytes())
    await pull("s3://pull/gem", tmp_path / "dst", cfg=PullConfig(streams=3, receive=receive))
    assert helpers.same_tree(src, tmp_path / "dst", list(SIZES))


async def test_cancelled_get_releases_the_buffer_promptly(helpers: Any) -> None:
    """A GET blocked on a silent server, cancelled: the thread is stopped, not left writing."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    pool = ConnectionPool(1)
    try:
        task = asyncio.ensure_future(
            pool.get(f"http://127.0.0.1:{port}/x", {}, memoryview(bytearray(10)), lambda r: None)
        )
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
    finally:
        await asyncio.wait_for(pool.close(), 5)
        srv.close()


def test_bad_receive_mode_names_the_option(tmp_path: Path, helpers: Any) -> None:
    with pytest.raises(UsageError, match="--receive"):
        open_source("http://127.0.0.1:1/", receive="magic")
    out = helpers.cli("pull", str(tmp_path), str(tmp_path / "dst"), "--receive", "magic")
    assert out.returncode == 2 and "--receive" in out.stderr


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (openssl), for a TLS origin on loopback."""
    import subprocess

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    argv = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
    argv += ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    made = subprocess.run(argv, capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {made.stderr[-200:]!r}")
    return key, cert


@pytest.mark.servers
async def test_tls_ranges_land_in_the_buffer(
    tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch, self_signed: tuple[Path, Path]
) -> None:
    """HTTPS (the object stores' path): TLS records decrypted into the caller's buffer, the
    certificate checked against the trust store (here a self-signed one put there for the test)."""
    import ssl

    key, cert = self_signed
    src = helpers.make_model(tmp_path / "src", SIZES)

    async def serve(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(src / request.match_info["p"])

    app = web.Application()
    app.router.add_get("/{p:.+}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    port = helpers.free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
    whole = (src / "model.bin").read_bytes()
    info = ObjectInfo(size=len(whole), etag=None)
    buf = memoryview(mmap.mmap(-1, 1 << 20))
    try:
        untrusted = HttpSource(f"https://127.0.0.1:{port}", streams=1)
        try:
            with pytest.raises(SourceError, match=r"cannot connect to 127\.0\.0\.1:\d+: .*certificate") as e:
                await untrusted.read_range("model.bin", 0, 1000, info, buf)
            assert not e.value.transient
        finally:
            await untrusted.close()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        source = HttpSource(f"https://127.0.0.1:{port}", streams=1)
        try:
            for a, b in [(0, 400_000), (400_000, 1_000_000)]:
                got = await source.read_range("model.bin", a, b, info, buf)
                assert isinstance(got, memoryview) and got.obj is buf.obj and bytes(got) == whole[a:b]
        finally:
            await source.close()
    finally:
        await runner.cleanup()


async def test_a_stalled_body_times_out_as_a_transient_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that sends the head and a few bytes, then nothing: the request fails after the
    read timeout (shortened here) with a retryable error, not a hang."""
    from gem_workloads.loader import rawhttp

    monkeypatch.setattr(rawhttp, "READ_TIMEOUT_S", 0.6)
    monkeypatch.setattr(rawhttp, "STALL_CHECK_S", 0.1)
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    done = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 10)
            done.wait(10)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    source = HttpSource(f"http://127.0.0.1:{port}", streams=1)
    try:
        info = ObjectInfo(size=1_000_000, etag=None)
        with pytest.raises(SourceError, match=r"no bytes for 1s") as e:
            await source.read_range("f", 0, 1_000_000, info, memoryview(bytearray(1_000_000)))
        assert e.value.transient
    finally:
        done.set()
        await source.close()
        srv.close()
        t.join(5)


@pytest.mark.servers
async def test_endpoint_refusing_presigned_urls_falls_back_to_obstore(
    tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An S3-compatible endpoint that takes only header signatures: the first 403 to a presigned
    request moves the source to obstore's own requests, and the pull completes."""
    root = tmp_path / "s3root"
    src = helpers.make_model(root / "bkt" / "gem", SIZES)
    refused = {"n": 0}

    async def handler(request: web.Request) -> web.StreamResponse:
        if "X-Amz-Signature" in request.query:
            refused["n"] += 1
            return web.Response(status=403, text="<Error><Code>AccessDenied</Code><Message>no</Message></Error>")
        return web.FileResponse(root / request.match_info["p"])

    app = web.Application()
    app.router.add_route("*", "/{p:.+}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = helpers.free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    helpers.s3_endpoint_env(monkeypatch, port)
    try:
        await pull("s3://bkt/gem", tmp_path / "dst", cfg=PullConfig(streams=2))
        assert helpers.same_tree(src, tmp_path / "dst", list(SIZES)) and refused["n"] >= 1
    finally:
        await runner.cleanup()
