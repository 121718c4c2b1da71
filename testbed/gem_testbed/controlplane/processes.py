"""Child processes of the control plane: started with their output in a log file, stopped for sure.

Each component runs in its own process group so that stopping it also stops anything it spawned, and
a component that exits during start-up is reported with the tail of its log instead of a timeout.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

LOG_TAIL_LINES = 15


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message is one line saying what went wrong."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def ensure_port_free(port: int, owner: str) -> None:
    """Raises `ControlPlaneError` when `port` cannot be bound on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise ControlPlaneError(f"port {port} for {owner} on 127.0.0.1 is in use ({error.strerror})") from None


def log_tail(path: pathlib.Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """One component: argv, its log file, and a stop that escalates from SIGTERM to SIGKILL."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: pathlib.Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        # None: the caller's environment.
        self.env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def exit_code(self) -> int | None:
        """None while running (or never started)."""
        return self._process.poll() if self._process else None

    def check_alive(self) -> None:
        """Raises `ControlPlaneError` with the log's tail when the process has exited."""
        code = self.exit_code()
        if code is not None:
            raise ControlPlaneError(
                f"{self.name} exited with status {code}; last lines of {self.log_path}:\n{log_tail(self.log_path)}"
            )

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Stops the process group; idempotent."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def wait_until(
    what: str,
    ready: Callable[[], bool],
    timeout: float,
    watched: Sequence[ManagedProcess] = (),
    interval: float = 0.25,
) -> None:
    """Polls `ready` until it is true; fails early when a watched process dies, else after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        for process in watched:
            process.check_alive()
        if ready():
            return
        if time.monotonic() > deadline:
            logs = ", ".join(str(p.log_path) for p in watched) or "no logs"
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what} (see {logs})")
        time.sleep(interval)
