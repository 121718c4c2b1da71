"""Ranged GETs read from the socket straight into the caller's buffer, on the event loop.

Why: the bytes of a model should be copied once, by the kernel, into the stream's page-aligned
buffer, which is then hashed and written with O_DIRECT. aiohttp hands a body over as many small
Python objects, each copied again; obstore gives one fresh Rust buffer per range that must be
copied into an aligned one and whose pages are faulted anew each time. Here each connection is
an asyncio BufferedProtocol whose buffer *is* the unread rest of the caller's range, so the
transport's `recv_into` lands the bytes in place. SO_RCVLOWAT (plain TCP) makes the kernel
report a socket readable only once 256 KiB are waiting, so a stream costs a few wake-ups per
MiB instead of one per segment. A slow origin, or a kernel that does not wake the reader, costs
at most STALL_CHECK_S: the mark drops to one byte until bytes come again. Measured on loopback
behind a 20 MB/s-per-connection proxy, 32 streams: 0.93 CPU-s/GB for the receive against
1.4-1.6 through obstore's get and 1.5-2.3 with a blocking thread per stream (their context
switches).

The client speaks just what a ranged GET needs: HTTP/1.1 keep-alive, Content-Length, chunked and
close-delimited bodies, redirects, TLS with the system's trust store; a pool keeps at most one
connection per stream. A stream that makes no progress for READ_TIMEOUT_S fails, as a retryable
transport error. Object stores reach it through presigned URLs (loader.sources); a proxy from the
environment sends a source back to its library client.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urljoin, urlsplit

from gem_workloads.loader.errors import SourceError

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
MAX_HEAD = 64 * 1024
MAX_ERROR_BODY = 64 * 1024
MAX_REDIRECTS = 5
LOW_WATER = 256 * 1024
"""SO_RCVLOWAT while a body streams in: wake-ups per MiB fall from ~60 (16 KiB sends) to ~4."""
STALL_CHECK_S = 0.25
RECEIVE_MODES = ("socket", "library")
"""`socket`: ranged GETs read straight into the stream's buffer (this module); `library`: through
obstore (s3, gs) or aiohttp (http), as a fallback and for comparison."""


@dataclass(frozen=True)
class Response:
    """Status and headers (names lower-cased) of one response; the body is read separately."""

    status: int
    headers: dict[str, str]
    url: str


class TransportError(SourceError):
    """The connection failed (reset, closed, timed out): a retry on a new connection can help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


def proxied(url: str) -> bool:
    """True when the environment routes this URL through a proxy (this client does not speak to one)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


class _Body:
    """How the current body is delimited, and where its bytes go."""

    def __init__(self, view: memoryview, length: int | None, chunked: bool) -> None:
        self.view = view
        self.length = length  # Content-Length; None: chunked or until the server closes
        self.chunked = chunked
        self.pos = 0
        self.raw = bytearray()  # chunked framing not yet parsed
        self.chunk_left = -1  # bytes left in the current chunk; -1: a size line comes next
        self.done = False


class Connection(asyncio.BufferedProtocol):
    """One keep-alive HTTP/1.1 connection; one request at a time, driven by the event loop."""

    def __init__(self, key: tuple[str, str, int]) -> None:
        self.key = key
        self.broken = False
        self.transport: asyncio.Transport | None = None
        self._sock: Any = None  # plain TCP only (asyncio's TransportSocket): SO_RCVLOWAT does not suit TLS
        self._lowat = 1
        self._head = bytearray(MAX_HEAD)
        self._hlen = 0
        self._scratch = bytearray(LOW_WATER)
        self._state = "idle"  # idle | head | body
        self._body: _Body | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._progress = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    # -- protocol callbacks (the loop's thread)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if transport.get_extra_info("sslcontext") is None:
            self._sock = transport.get_extra_info("socket")

    def get_buffer(self, sizehint: int) -> memoryview:
        body = self._body
        if self._state == "body" and body is not None and body.length is not None and not body.chunked:
            return body.view[body.pos : body.length]  # the caller's buffer, exactly what is still due
        if self._state == "head":
            if self._hlen >= len(self._head):
                return memoryview(self._scratch)  # overflow: buffer_updated reports it
            return memoryview(self._head)[self._hlen :]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        self._progress = time.monotonic()
        if self._state == "head":
            if self._hlen >= len(self._head):
                self._fail(SourceError(f"response head larger than {MAX_HEAD} bytes"))
                return
            self._hlen += nbytes
            if self._head.find(b"\r\n\r\n", 0, self._hlen) >= 0:
                self._pause()  # the body's first bytes wait in the socket until read_body says where
                self._wake()
            return
        body = self._body
        if self._state != "body" or body is None:
            self._fail(TransportError("the server sent bytes nobody asked for"))
            return
        if body.length is not None and not body.chunked:
            body.pos += nbytes
            if body.pos >= body.length:
                body.done = True
                self._pause()  # nothing more is due: an empty buffer would be a protocol error
                self._wake()
            else:
                self._set_lowat(min(LOW_WATER, body.length - body.pos))
            return
        self._feed(body, memoryview(self._scratch)[:nbytes])

    def eof_received(self) -> bool | None:
        body = self._body
        if self._state == "body" and body is not None and body.length is None and not body.chunked:
            body.done = True  # a close-delimited body ends here
            self._wake()
        else:
            self._fail(TransportError(self._closed_why()))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.broken = True
        body = self._body
        if not (body is not None and body.done):
            self._fail(TransportError(self._closed_why() + (f": {exc}" if exc else "")))

    # -- helpers

    def _closed_why(self) -> str:
        body = self._body
        if self._state == "body" and body is not None:
            of = f" of {body.length}" if body.length is not None else ""
            return f"connection closed by the server after {body.pos}{of} body bytes"
        return "connection closed by the server"

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self.broken = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def _pause(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _set_lowat(self, n: int) -> None:
        n = max(1, n)
        if self._sock is not None and n != self._lowat:
            with contextlib.suppress(OSError):
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
                self._lowat = n

    def _feed(self, body: _Body, data: memoryview) -> None:
        """Chunked or close-delimited bytes (from scratch) into the caller's buffer."""
        if not body.chunked:
            if body.pos + len(data) > len(body.view):
                self._fail(SourceError(f"body is larger than the {len(body.view)} bytes asked for"))
                return
            body.view[body.pos : body.pos + len(data)] = data
            body.pos += len(data)
            return
        raw = body.raw
        raw += data
        while not body.done:
            if body.chunk_left > 0:
                take = min(body.chunk_left, len(raw))
                if take == 0:
                    return
                if body.pos + take > len(body.view):
                    self._fail(SourceError(f"body is larger than the {len(body.view)} bytes asked for"))
                    return
                body.view[body.pos : body.pos + take] = raw[:take]
                body.pos += take
                body.chunk_left -= take
                del raw[:take]
                if body.chunk_left == 0:
                    body.chunk_left = -2  # the CRLF after a chunk
                continue
            end = raw.find(b"\r\n")
            if end < 0:
                if len(raw) > MAX_HEAD:
                    self._fail(TransportError("chunk framing line too long"))
                return
            line = bytes(raw[:end])
            del raw[: end + 2]
            if body.chunk_left == -2:
                if line:
                    self._fail(TransportError("chunk not followed by CRLF"))
                    return
                body.chunk_left = -1
            elif body.chunk_left == -1:
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self._fail(TransportError(f"bad chunk size {line[:20]!r}"))
                    return
                body.chunk_left = size if size else -3
            elif not line:  # -3: trailers until an empty line
                body.done = True
                if raw:
                    self._fail(TransportError("bytes after the end of a chunked body"))
                    return
                self._wake()

    def _watch(self) -> None:
        """Every STALL_CHECK_S while a request is open: undo SO_RCVLOWAT if bytes are not coming,
        and fail the request after READ_TIMEOUT_S without progress."""
        if self._state == "idle" or self.broken:
            self._timer = None
            return
        idle = time.monotonic() - self._progress
        if idle > READ_TIMEOUT_S:
            self._fail(TransportError(f"no bytes for {READ_TIMEOUT_S:.0f}s"))
            return
        if idle > STALL_CHECK_S and self._lowat > 1:
            self._set_lowat(1)  # whatever is waiting is read now; the next bytes raise the mark again
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(STALL_CHECK_S, self._watch)

    async def _wait(self) -> None:
        if self.broken:  # failed while nobody waited (the server closed between two requests)
            raise TransportError(self._closed_why())
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self._progress = time.monotonic()
        if self._timer is None:
            self._timer = loop.call_later(STALL_CHECK_S, self._watch)
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _idle(self) -> None:
        self._state = "idle"
        self._body = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.broken:
            self._resume()  # an idle connection still notices the server closing it

    # -- requests (the caller's task)

    async def request(self, target: str, headers: dict[str, str], method: str = "GET") -> Response:
        if self.broken or self.transport is None or self.transport.is_closing():
            raise TransportError("connection closed by the server")
        lines = [f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
        self._hlen = 0
        self._set_lowat(1)
        self._state = "head"
        self.transport.write("\r\n".join(lines).encode("latin-1"))
        while True:
            while (end := self._head.find(b"\r\n\r\n", 0, self._hlen)) < 0:
                self._resume()
                await self._wait()
            head = bytes(self._head[:end]).decode("latin-1")
            rest = bytes(self._head[end + 4 : self._hlen])
            self._head[: len(rest)] = rest
            self._hlen = len(rest)
            status, fields = _parse_head(head)
            if status >= 200:
                return Response(status, fields, "")
            # 1xx (100 Continue, 103 Early Hints) precede the real response

    async def read_body(self, resp: Response, view: memoryview) -> int:
        """Read the whole body into `view`; returns its length. More bytes than fit is an error."""
        chunked = "chunked" in resp.headers.get("transfer-encoding", "").lower()
        length_text = resp.headers.get("content-length")
        length = None if chunked or length_text is None else int(length_text)
        if length is not None and length > len(view):
            raise SourceError(f"body of {length} bytes is larger than the {len(view)} asked for")
        body = _Body(view[:length] if length is not None else view, length, chunked)
        pending, self._hlen = bytes(self._head[: self._hlen]), 0
        self._body = body
        self._state = "body"
        self._resume()
        if length is not None and not chunked:
            n = min(len(pending), length)
            view[:n] = pending[:n]
            body.pos = n
            if len(pending) > length:
                raise TransportError("the server sent more than the body")
            body.done = body.pos >= length
            if body.done:
                self._pause()
            else:
                self._set_lowat(min(LOW_WATER, length - body.pos))
        elif pending:
            self._feed(body, memoryview(pending))
        try:
            while not body.done:
                await self._wait()
        finally:
            self._set_lowat(1)
            self._idle()
        if length is None and not chunked:
            self.close()  # close-delimited: the connection is spent
        elif "close" in resp.headers.get("connection", "").lower():
            self.close()
        return body.pos

    def no_body(self, resp: Response) -> None:
        """After the response to a HEAD: nothing follows its head."""
        if self._hlen or "close" in resp.headers.get("connection", "").lower():
            self.close()  # the server closes it, or sent bytes after a HEAD's response
        else:
            self._idle()

    async def drain(self, resp: Response, limit: int = MAX_ERROR_BODY) -> bytes:
        """A small body (an error's, a redirect's) as bytes; a larger one closes the connection."""
        length = resp.headers.get("content-length")
        chunked = "chunked" in resp.headers.get("transfer-encoding", "").lower()
        if not chunked and (length is None or int(length) > limit):
            self.close()
            return b""
        buf = memoryview(bytearray(limit))
        try:
            n = await self.read_body(resp, buf)
        except SourceError:
            self.close()
            return b""
        return bytes(buf[:n])

    def close(self) -> None:
        self.broken = True
        self._idle()
        if self.transport is not None:
            self.transport.abort()

    abort = close


def _parse_head(head: str) -> tuple[int, dict[str, str]]:
    status_line, *rest = head.split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise TransportError(f"malformed status line {status_line[:80]!r}")
    fields: dict[str, str] = {}
    for line in rest:
        name, sep, value = line.partition(":")
        if sep:
            key = name.strip().lower()
            fields[key] = f"{fields[key]}, {value.strip()}" if key in fields else value.strip()
    if parts[0] == "HTTP/1.0" and "keep-alive" not in fields.get("connection", "").lower():
        fields["connection"] = "close"
    return int(parts[1]), fields


Check = Callable[[Response], None]
"""Looks at status and headers before the body is read; raises to refuse the response."""


def _endpoint(parts: SplitResult) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL: the key its pooled connections are kept under."""
    scheme = parts.scheme.lower()
    return scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80)


class ConnectionPool:
    """Keep-alive connections, at most one per stream (the puller runs one GET per stream at a time)."""

    def __init__(self, streams: int) -> None:
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._busy: set[Connection] = set()
        self._tls: ssl.SSLContext | None = None
        self._closed = False
        self._streams = streams

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def _checkout(self, scheme: str, host: str, port: int) -> Connection:
        if self._closed:
            raise SourceError("the source is closed")
        idle = self._idle.get((scheme, host, port))
        while idle:
            conn = idle.pop()
            if not conn.broken and conn.transport is not None and not conn.transport.is_closing():
                self._busy.add(conn)
                return conn
        loop = asyncio.get_running_loop()
        tls = self._context() if scheme == "https" else None
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection((scheme, host, port)), host, port, ssl=tls, server_hostname=host if tls else None
                ),
                CONNECT_TIMEOUT_S,
            )
        except ssl.SSLCertVerificationError as e:  # a retry cannot help: say so at once
            raise SourceError(f"cannot connect to {host}:{port}: {e.verify_message or e}", transient=False) from None
        except (OSError, TimeoutError) as e:
            raise TransportError(f"cannot connect to {host}:{port}: {getattr(e, 'strerror', None) or e}") from None
        self._busy.add(conn)
        return conn

    async def connect_ahead(self, url: str) -> None:
        """Open one keep-alive connection to `url`'s host unless one is idle, for the first GET
        to find ready: its TCP (and TLS) setup then overlaps whatever the caller does meanwhile
        (the manifest read). A failure is the first request's to report: it retries as usual."""
        key = _endpoint(urlsplit(url))
        if self._idle.get(key):
            return
        with contextlib.suppress(SourceError):
            self._checkin(await self._checkout(*key))

    def _checkin(self, conn: Connection) -> None:
        self._busy.discard(conn)
        if conn.broken or self._closed:
            conn.close()
        else:
            self._idle.setdefault(conn.key, []).append(conn)

    async def get(
        self, url: str, headers: dict[str, str], buf: memoryview, check: Check, method: str = "GET"
    ) -> tuple[Response, int | bytes]:
        """The response and either the body's length (in `buf`) or, for a non-2xx, its first bytes.
        `method` HEAD: no body is read (the length is 0, a non-2xx gives b"")."""
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            conn = await self._checkout(*_endpoint(parts))
            try:
                target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                hdrs = {"Host": parts.netloc.rpartition("@")[2], **headers, "User-Agent": "gem-load"}
                resp = await conn.request(target, hdrs, method)
                resp = Response(resp.status, resp.headers, url)
                head_only = method == "HEAD"
                if head_only:
                    conn.no_body(resp)
                if resp.status in (301, 302, 303, 307, 308) and "location" in resp.headers:
                    if not head_only:
                        await conn.drain(resp)
                    url = urljoin(url, resp.headers["location"])
                    continue
                if resp.status not in (200, 206):
                    return resp, b"" if head_only else await conn.drain(resp)
                if head_only:
                    return resp, 0
                check(resp)
                return resp, await conn.read_body(resp, buf)
            except BaseException:
                conn.close()  # mid-response (an error, a refused response, a cancel): not reusable
                raise
            finally:
                self._checkin(conn)
        raise SourceError(f"more than {MAX_REDIRECTS} redirects")

    async def close(self) -> None:
        self._closed = True
        for conn in [c for idle in self._idle.values() for c in idle] + list(self._busy):
            conn.close()
        self._idle.clear()
        self._busy.clear()
