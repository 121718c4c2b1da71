"""Where a source's Parquet files live: pyarrow filesystems for s3://, gs://, https:// and paths, with retries.

Credentials come from the environment as the model store reads them (``AWS_*``, ``AWS_ENDPOINT_URL``,
``GOOGLE_*``). A source may carry its own Secret: the operator mounts it with the prefix
``GEM_DATA_<NAME>_`` (:func:`env_prefix`), so two sources in two accounts never overwrite each
other's keys; a prefixed variable wins over the plain one.

Errors reaching a store are retried with backoff and then raised as :class:`DataUnavailable`
naming the source and the URI: a training run never silently trains around a store it cannot read.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlparse

import pyarrow.fs as pafs

log = logging.getLogger("gem_workloads.data")

T = TypeVar("T")
RETRY_ATTEMPTS = 5
RETRY_BASE_S = 0.5


class RetrySettingError(ValueError):
    """GEM_DATA_RETRIES or GEM_DATA_RETRY_BASE_S holds a value the retries cannot run with."""

    def __init__(self, variable: str, value: str, expected: str) -> None:
        self.variable, self.value, self.expected = variable, value, expected
        super().__init__(f"{variable}={value!r}: expected {expected}")


def retry_settings(env: Mapping[str, str]) -> tuple[int, float]:
    """(attempts, first backoff in seconds) from GEM_DATA_RETRIES and GEM_DATA_RETRY_BASE_S.

    Checked, not just converted: 0 attempts made the retry loop run no attempt at all, so every
    read returned None as if it had read nothing; `abc` was a traceback from deep in a data read.
    """
    raw_attempts = env.get("GEM_DATA_RETRIES", "").strip()
    raw_base = env.get("GEM_DATA_RETRY_BASE_S", "").strip()
    attempts, base_s = RETRY_ATTEMPTS, RETRY_BASE_S
    if raw_attempts:
        try:
            attempts = int(raw_attempts)
        except ValueError:
            attempts = 0
        if attempts < 1:
            raise RetrySettingError("GEM_DATA_RETRIES", raw_attempts, "a whole number >= 1 (attempts per read)")
    if raw_base:
        try:
            base_s = float(raw_base)
        except ValueError:
            base_s = -1.0
        if not 0 <= base_s < float("inf"):
            raise RetrySettingError("GEM_DATA_RETRY_BASE_S", raw_base, "a finite number of seconds >= 0")
    return attempts, base_s


class DataUnavailable(RuntimeError):
    """A store stayed unreachable (or a dataset absent) after the retries; the message names source and URI."""

    reason = "DataUnavailable"


def env_prefix(source: str) -> str:
    """The prefix of a source's own credential variables (must match the operator's envFrom prefix)."""
    return "GEM_DATA_" + source.upper().replace("-", "_") + "_"


@dataclass(frozen=True)
class Location:
    """A resolved dataset location: the filesystem and the path on it."""

    fs: pafs.FileSystem
    path: str
    uri: str


def _var(env: Mapping[str, str], prefix: str, *names: str) -> str | None:
    for name in names:
        for key in (prefix + name, name):
            value = env.get(key)
            if value:
                return value
    return None


def _s3(env: Mapping[str, str], prefix: str) -> pafs.FileSystem:
    endpoint = _var(env, prefix, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    kwargs: dict[str, object] = {
        "access_key": _var(env, prefix, "AWS_ACCESS_KEY_ID"),
        "secret_key": _var(env, prefix, "AWS_SECRET_ACCESS_KEY"),
        "session_token": _var(env, prefix, "AWS_SESSION_TOKEN"),
        "region": _var(env, prefix, "AWS_REGION", "AWS_DEFAULT_REGION") or "us-east-1",
        # Bounded waits: a dead endpoint must reach our retry loop, not hang in the SDK.
        "connect_timeout": 5.0,
        "request_timeout": 30.0,
    }
    if endpoint:
        parsed = urlparse(endpoint)
        kwargs["endpoint_override"] = parsed.netloc or parsed.path
        kwargs["scheme"] = parsed.scheme or "https"
    if kwargs["access_key"] is None:
        kwargs = {k: v for k, v in kwargs.items() if k not in ("access_key", "secret_key", "session_token")}
    return pafs.S3FileSystem(**kwargs)  # type: ignore[arg-type]


def _https() -> pafs.FileSystem:
    from fsspec.implementations.http import HTTPFileSystem  # type: ignore[import-untyped]

    return pafs.PyFileSystem(pafs.FSSpecHandler(HTTPFileSystem()))


def http_listing(uri: str) -> list[str]:
    """The ``.parquet`` files a web server's directory index links to (nginx ``autoindex``, S3 website...)."""
    from fsspec.implementations.http import HTTPFileSystem

    names = HTTPFileSystem().ls(uri, detail=False)
    return sorted(str(n) for n in names if str(n).endswith(".parquet"))


def locate(source: str, uri: str, env: Mapping[str, str] | None = None) -> Location:
    """The filesystem and path of ``uri`` for ``source`` (credentials looked up with its prefix)."""
    env = os.environ if env is None else env
    prefix = env_prefix(source)
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "s3":
        return Location(_s3(env, prefix), f"{parsed.netloc}{parsed.path}".rstrip("/"), uri)
    if scheme == "gs":
        anonymous = _var(env, prefix, "GOOGLE_APPLICATION_CREDENTIALS") is None and bool(
            env.get("STORAGE_EMULATOR_HOST")
        )
        return Location(pafs.GcsFileSystem(anonymous=anonymous), f"{parsed.netloc}{parsed.path}".rstrip("/"), uri)
    if scheme in ("http", "https"):
        return Location(_https(), uri, uri)
    if scheme == "file":
        return Location(pafs.LocalFileSystem(), parsed.path, uri)
    return Location(pafs.LocalFileSystem(), uri, uri)


def with_retries(
    what: str,
    fn: Callable[[], T],
    *,
    attempts: int | None = None,
    base_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``fn()``, retried on I/O errors with doubling backoff; then :class:`DataUnavailable` about ``what``.

    A missing path is not retried: it will not appear by waiting, and the message says so at once.
    Defaults: ``GEM_DATA_RETRIES`` attempts (5), the first backoff ``GEM_DATA_RETRY_BASE_S`` (0.5 s).
    """
    env_attempts, env_base_s = retry_settings(os.environ)
    attempts = attempts or env_attempts
    base_s = env_base_s if base_s is None else base_s
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except FileNotFoundError as exc:
            raise DataUnavailable(f"{what}: not found ({exc})") from exc
        except OSError as exc:  # pyarrow's ArrowIOError is an OSError; ArrowInvalid (bad data) is not
            if attempt == attempts:
                raise DataUnavailable(f"{what}: unreachable after {attempts} attempts: {exc}") from exc
            delay = base_s * 2 ** (attempt - 1)
            log.warning("%s: attempt %d/%d failed (%s); retrying in %.1fs", what, attempt, attempts, exc, delay)
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["DataUnavailable", "Location", "env_prefix", "locate", "with_retries"]
