"""Progress reporting: a rich bar for people, plain lines for logs, JSON lines for machines.

The puller only calls `start`, `advance`, `event` and `finish`; how that is shown is chosen
once from --progress (auto = rich on a terminal, plain otherwise). JSON lines go to stdout,
one object per line, so an operator or a script can follow a pull without parsing prose;
everything for people goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

MODES = ("auto", "plain", "json", "none")


class Reporter(Protocol):
    def start(self, total_bytes: int, files: int, done_bytes: int, digest: str) -> None: ...

    def advance(self, nbytes: int, source: str) -> None: ...

    def event(self, kind: str, **fields: Any) -> None: ...

    def finish(self, summary: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class NullReporter:
    """For library use and tests: records events so they can be asserted on."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def start(self, total_bytes: int, files: int, done_bytes: int, digest: str) -> None:
        self.events.append({"event": "start", "bytes": total_bytes, "resumedBytes": done_bytes})

    def advance(self, nbytes: int, source: str) -> None:
        return None

    def event(self, kind: str, **fields: Any) -> None:
        self.events.append({"event": kind, **fields})

    def finish(self, summary: dict[str, Any]) -> None:
        self.events.append({"event": "done", **summary})

    def close(self) -> None:
        return None


class JsonReporter:
    """One JSON object per line on stdout; progress lines at most every `interval` seconds."""

    def __init__(self, out: TextIO | None = None, interval: float = 0.5) -> None:
        self._out = out or sys.stdout
        self._interval = interval
        self._total = 0
        self._done = 0
        self._last = 0.0
        self._t0 = time.monotonic()

    def _emit(self, rec: dict[str, Any]) -> None:
        rec.setdefault("t", round(time.monotonic() - self._t0, 3))
        self._out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self._out.flush()

    def start(self, total_bytes: int, files: int, done_bytes: int, digest: str) -> None:
        self._total, self._done = total_bytes, done_bytes
        self._emit(
            {
                "event": "start",
                "bytes": total_bytes,
                "files": files,
                "resumedBytes": done_bytes,
                "manifest": digest,
            }
        )

    def advance(self, nbytes: int, source: str) -> None:
        self._done += nbytes
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._emit({"event": "progress", "doneBytes": self._done, "bytes": self._total})

    def event(self, kind: str, **fields: Any) -> None:
        self._emit({"event": kind, **fields})

    def finish(self, summary: dict[str, Any]) -> None:
        self._emit({"event": "done", **summary})

    def close(self) -> None:
        return None


class PlainReporter(JsonReporter):
    """Human lines on stderr every few seconds: fit for `kubectl logs` of an init container."""

    def __init__(self, interval: float = 5.0) -> None:
        super().__init__(sys.stderr, interval)

    def _emit(self, rec: dict[str, Any]) -> None:
        kind = rec.pop("event")
        rec.pop("t", None)
        if kind == "error":
            return  # the CLI prints the error itself, once
        if kind == "progress":
            pct = 100.0 * rec["doneBytes"] / max(1, rec["bytes"])
            rate = rec["doneBytes"] / max(1e-6, time.monotonic() - self._t0) / 1e6
            text = f"{pct:5.1f}% {rec['doneBytes']}/{rec['bytes']} bytes ({rate:.0f} MB/s avg)"
        else:
            text = kind + " " + " ".join(f"{k}={v}" for k, v in rec.items())
        self._out.write(f"gem-load: {text}\n")
        self._out.flush()


class RichReporter:
    """A live bar with bytes, speed and ETA on stderr; events print above it."""

    def __init__(self) -> None:
        self._console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self._console,
            transient=False,
        )
        self._task: TaskID | None = None

    def start(self, total_bytes: int, files: int, done_bytes: int, digest: str) -> None:
        self._progress.start()
        self._task = self._progress.add_task(f"{files} files", total=total_bytes, completed=done_bytes)

    def advance(self, nbytes: int, source: str) -> None:
        if self._task is not None:
            self._progress.advance(self._task, nbytes)

    def event(self, kind: str, **fields: Any) -> None:
        if kind in ("retry", "restart", "fallback", "waiting", "cache-hit", "evict", "corrupt-cache"):
            self._console.log(f"{kind}: " + ", ".join(f"{k}={v}" for k, v in fields.items()))

    def finish(self, summary: dict[str, Any]) -> None:
        self._progress.stop()
        self._console.print(
            f"[green]done[/green] {summary.get('bytes', 0)} bytes in {summary.get('seconds', 0):.1f}s "
            f"(fetched {summary.get('fetchedBytes', 0)}, sources {summary.get('sources', {})})"
        )

    def close(self) -> None:
        self._progress.stop()


def make_reporter(mode: str) -> Reporter:
    if mode == "json":
        return JsonReporter()
    if mode == "none":
        return NullReporter()
    if mode == "plain" or (mode == "auto" and not sys.stderr.isatty()):
        return PlainReporter()
    return RichReporter()
