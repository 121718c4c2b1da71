"""Replay labelled requests and score the served model: what a ranker's AUC is on real traffic.

Input: JSONL, one ``{"body": <POST /v1/rank body>, "labels": {task: 0 or 1}}`` per line (one
candidate per body; ``python -m gem_workloads.training.holdout`` writes an exported version's
holdout this way). Each body is sent as it is, at most ``max_in_flight`` at once; the served
probabilities are paired with the labels and scored per task exactly as the trainer scores its
holdout (:func:`gem_workloads.training.holdout.task_metrics`), so the two AUCs compare.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from gem_common.traces import TraceError, json_lines

from ..training.holdout import task_metrics
from .runner import endpoints


def read_labelled(path: str | Path) -> list[dict[str, Any]]:
    """Every line of a labelled file; a line that is not JSON or not of that shape is an error
    naming it (``gem_common.traces.TraceError``, a ValueError), before any request is sent."""
    lines = []
    for n, line in json_lines(Path(path)):
        if not isinstance(line, dict) or not isinstance(line.get("body"), dict):
            raise TraceError(f"{path}: line {n}: expected {{'body': {{...}}, 'labels': {{task: 0|1}}}}")
        lines.append(line)
    return lines


async def score_labelled(
    url: str, lines: list[dict[str, Any]], max_in_flight: int = 16, timeout_s: float = 30.0
) -> dict[str, Any]:
    """Send every body; returns ``{"requests", "errors", "model_version", "eval": {task: {auc, ...}}}``."""
    _, rank_url = endpoints(url)
    gate = asyncio.Semaphore(max_in_flight)
    answers: list[dict[str, Any] | None] = [None] * len(lines)
    errors: list[str] = []

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        async with gate:
            try:
                async with session.post(rank_url, json=lines[i]["body"]) as r:
                    if r.status != 200:
                        errors.append(f"request {i}: HTTP {r.status}: {(await r.text())[:200]}")
                        return
                    answers[i] = await r.json()
            except (aiohttp.ClientError, TimeoutError) as exc:
                errors.append(f"request {i}: {type(exc).__name__}: {exc}")

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        await asyncio.gather(*(one(session, i) for i in range(len(lines))))
    answered = [(line, a) for line, a in zip(lines, answers, strict=True) if a is not None]
    result: dict[str, Any] = {"requests": len(lines), "errors": len(errors), "error_samples": errors[:5]}
    if not answered:
        return {**result, "eval": {}}
    tasks = list(answered[0][1]["tasks"])
    probs = np.array([a["scores"][0] for _, a in answered], dtype=np.float64)
    labels = np.zeros_like(probs)
    mask = np.zeros_like(probs)
    for row, (line, _) in enumerate(answered):
        for t, task in enumerate(tasks):
            if task in (line.get("labels") or {}):
                labels[row, t], mask[row, t] = float(line["labels"][task]), 1.0
    versions = sorted({str(a.get("model_version")) for _, a in answered})
    return {**result, "model_version": versions, "eval": task_metrics(probs, labels, mask, tasks)}
