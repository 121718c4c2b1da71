"""Error kinds, each mapped to its own exit status so scripts and init containers can tell them apart."""

from __future__ import annotations


class LoaderError(Exception):
    """Base class; the message is what the user reads, so it names the file, source or argument."""

    exit_code = 1


class UsageError(LoaderError):
    """A bad argument; the message starts with the argument's name."""

    exit_code = 2


class ManifestError(LoaderError):
    """The manifest is missing, unreadable or malformed."""

    exit_code = 2


class IntegrityError(LoaderError):
    """Bytes did not match the manifest: never mark anything complete after this."""

    exit_code = 3


class DiskFullError(LoaderError):
    """The destination or cache ran out of space (or hit a file-size limit).

    `path` is where the write failed and `need` the bytes that had to fit there, so the pull can
    tell a full node cache (fall back to a direct pull) from a full destination (fail).
    """

    exit_code = 4

    def __init__(self, message: str, *, path: str = "", need: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.need = need


class SourceError(LoaderError):
    """A source failed; transient ones (5xx, SlowDown, timeouts) are retried with backoff."""

    def __init__(self, message: str, *, transient: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status


class ObjectChanged(SourceError):
    """The object's ETag or size changed between requests: the file must restart cleanly."""
