"""The candidate-set message the ranking tier publishes to the Redis stream and the workers consume.

Stream entry fields: ``request`` (the ``POST /v1/rank`` body, JSON), ``scores`` (JSON list: the
ranker's first-task probability per candidate, optional) and ``ts`` (publish time, Unix seconds).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class CandidateSet:
    request: Any
    scores: list[float] | None
    ts: float

    def fields(self) -> dict[str, str]:
        out = {"request": json.dumps(self.request, separators=(",", ":")), "ts": f"{self.ts:.6f}"}
        if self.scores is not None:
            out["scores"] = json.dumps(self.scores)
        return out

    @classmethod
    def from_fields(cls, fields: dict[bytes, bytes]) -> CandidateSet:
        """Raises ValueError (with the field named) on an unusable entry."""
        try:
            request = json.loads(fields[b"request"])
        except KeyError:
            raise ValueError("entry has no 'request' field") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"field 'request' is not JSON: {exc}") from None
        except RecursionError:  # json's decoder recurses per level; the entry is dead-lettered at once
            raise ValueError("field 'request' is not JSON: nested too deeply") from None
        scores = None
        if b"scores" in fields:
            try:
                raw = json.loads(fields[b"scores"])
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(f"field 'scores' is not JSON: {exc}") from None
            if not isinstance(raw, list) or not all(isinstance(x, int | float) for x in raw):
                raise ValueError("field 'scores' must be a list of numbers")
            scores = [float(x) for x in raw]
        try:
            ts = float(fields.get(b"ts", b"0"))
        except ValueError:
            ts = 0.0
        return cls(request, scores, ts or time.time())
