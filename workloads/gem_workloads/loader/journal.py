"""The pull journal: which parts are already written and verified, so a restarted pull skips them.

It is an append-only JSON-lines file next to the partial files. A part is recorded only after
its bytes passed the manifest's part digest and were written with pwrite, so a killed process
loses at most the parts in flight. The first line binds the journal to one manifest digest;
a journal for another manifest is discarded rather than trusted. A torn last line (the
process died mid-write) is ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

JOURNAL_NAME = ".gem-load-journal"


class Journal:
    """Done parts per file, persisted as they complete."""

    def __init__(self, path: Path, manifest_digest: str) -> None:
        self.path = path
        self.digest = manifest_digest
        self.done: dict[str, set[int]] = {}
        self._fh: IO[str] | None = None
        self._load()

    def _load(self) -> None:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            lines = []
        header_ok = False
        for i, line in enumerate(lines):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if i == 0:
                header_ok = isinstance(rec, dict) and rec.get("manifest") == self.digest
                if not header_ok:
                    break
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("f"), str):
                continue
            if rec.get("reset"):
                self.done.pop(rec["f"], None)
            elif isinstance(rec.get("p"), int):
                self.done.setdefault(rec["f"], set()).add(rec["p"])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if header_ok:
            self._fh = open(self.path, "a")  # noqa: SIM115 - lives as long as the journal
        else:
            self.done.clear()
            self._fh = open(self.path, "w")  # noqa: SIM115
            self._write({"manifest": self.digest})

    def _write(self, rec: dict[str, object]) -> None:
        assert self._fh is not None
        self._fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self._fh.flush()

    def is_done(self, path: str, part: int) -> bool:
        return part in self.done.get(path, ())

    def mark_done(self, path: str, part: int) -> None:
        self.done.setdefault(path, set()).add(part)
        self._write({"f": path, "p": part})

    def reset(self, path: str) -> None:
        """Forget a file's parts (its object changed at the source, or a re-check failed)."""
        self.done.pop(path, None)
        self._write({"f": path, "reset": True})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
