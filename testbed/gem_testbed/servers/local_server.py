"""The lifecycle the embedded cluster's helper servers share (Prometheus, the nginx origin).

Each is one child process on loopback with a work directory of its own (a temporary one unless
the caller keeps it): `start()` is the subclass's, `stop()` ends the process (SIGTERM, then
SIGKILL after a grace period), `close()` also removes a temporary work directory, and `with`
does both ends, so a failed run never leaves a server behind.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self


class LocalServer:
    """Base of a loopback server process: subclasses set `proc` in `start()`."""

    def __init__(self, work_dir: Path | None, prefix: str) -> None:
        self._tmp = None if work_dir else tempfile.TemporaryDirectory(prefix=prefix)
        self.work_dir = Path(work_dir) if work_dir else Path(self._tmp.name)  # type: ignore[union-attr]
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        raise NotImplementedError

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = ["LocalServer"]
