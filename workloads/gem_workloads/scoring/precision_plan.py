"""Choosing, recording and applying a serving precision plan (see :mod:`.precision` for the rules)."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..models.model_dir import LoadedModel
from .engine import Engine
from .precision import (
    PLAN_FILE,
    PRECISIONS,
    PrecisionPlan,
    _median_time,
    _timed,
    _unit_inputs,
    applies,
    apply_plan,
    convert,
    holdout_scores,
    mean_auc,
    offered,
    replace_unit,
    synthetic_holdout,
    unit_names,
)
from .request import example_request, parse_request

log = logging.getLogger("gem_workloads.scoring.precision")


@contextlib.contextmanager
def swapped(model: nn.Module, modules: dict[str, nn.Module]) -> Iterator[nn.Module]:
    """``model`` with the units named in ``modules`` replaced, restored on exit (no model copy)."""
    units = unit_names(model)
    originals = {name: units[name] for name in modules}
    try:
        for name, module in modules.items():
            replace_unit(model, name, module)
        yield model
    finally:
        for name, module in originals.items():
            replace_unit(model, name, module)


def request_runner(loaded: LoadedModel, candidates: int, device: torch.device) -> Callable[[nn.Module], torch.Tensor]:
    """Scores one representative request (``candidates`` candidates, a full history) with a given model."""
    cfg = loaded.config
    body = example_request(loaded.schema, candidates, cfg.seq_len, seed=candidates)
    req = parse_request(body, loaded.schema, cfg.seq_len, candidates)

    def run(model: nn.Module) -> torch.Tensor:
        engine = Engine(replace(loaded, model=model), device)
        return torch.from_numpy(engine.score([req], share=True)[0])

    return run


class _Quality:
    """Scores of a model against fp32 on the holdout (or on the representative request without one)."""

    def __init__(self, loaded: LoadedModel, run: Callable[[nn.Module], torch.Tensor], device: torch.device) -> None:
        kind_ok = loaded.kind != "vertical" or not (loaded.config.memory_len or loaded.config.solaris_width)
        self.holdout, self.labelled = synthetic_holdout(loaded, 2048, device) if kind_ok else ([], False)
        self.run = run
        self.ref = self.scores(loaded.model)
        self.auc_fp32 = mean_auc(self.ref, self.holdout) if self.labelled else None

    def scores(self, model: nn.Module) -> torch.Tensor:
        return holdout_scores(model, self.holdout) if self.holdout else self.run(model)

    def measure(self, model: nn.Module) -> tuple[float | None, float, float]:
        """(AUC, mean and max absolute probability error against fp32)."""
        probs = self.scores(model)
        err = (probs - self.ref).abs()
        auc = mean_auc(probs, self.holdout) if self.labelled else None
        return auc, float(err.mean()), float(err.max())


def _propose(
    model: nn.Module,
    run: Callable[[nn.Module], Any],
    kinds: list[str],
    device: torch.device,
    reps: int,
    min_speedup: float,
) -> tuple[dict[str, str], dict[tuple[str, str], nn.Module]]:
    """Micro-benchmark: the fastest precision per unit (at least ``min_speedup`` over fp32)."""
    inputs = _unit_inputs(model, run)
    proposal: dict[str, str] = {}
    converted: dict[tuple[str, str], nn.Module] = {}
    with torch.inference_mode():
        for name, unit in unit_names(model).items():
            if name not in inputs:
                continue  # not on the scoring path
            args, kwargs = inputs[name]
            t32 = _median_time(functools.partial(unit, *args, **kwargs), device, reps)
            # The fastest low precision that clears the margin (min_speedup < 1 accepts a slower one).
            best, best_t = "fp32", math.inf
            for p in (k for k in kinds if applies(unit, k)):
                conv = converted.setdefault((name, p), convert(unit, p))
                t = _median_time(functools.partial(conv, *args, **kwargs), device, reps)
                if t * min_speedup <= t32 and t < best_t:
                    best, best_t = p, t
            if best != "fp32":
                proposal[name] = best
    return proposal, converted


def plan_precision(
    loaded: LoadedModel,
    requested: str,
    device: torch.device,
    *,
    candidates: int = 256,
    reps: int = 5,
    min_speedup: float = 1.1,
    max_auc_drop: float = 0.001,
    max_score_error: float = 0.005,
) -> PrecisionPlan:
    """Choose a plan for ``loaded`` on ``device`` (see :mod:`.precision`); ``loaded`` is left in fp32."""
    if requested not in PRECISIONS:
        raise ValueError(f"precision {requested!r}: choose one of {list(PRECISIONS)}")
    model = loaded.model
    units = unit_names(model)
    plan = PrecisionPlan(requested, device.type, {n: "fp32" for n in units})
    if requested == "fp32":
        return plan
    kinds, plan.notes = offered(device)
    run = request_runner(loaded, candidates, device)
    quality = _Quality(loaded, run, device)
    plan.auc_fp32 = quality.auc_fp32
    if requested == "auto":
        proposal, converted = _propose(model, run, kinds, device, reps, min_speedup)
    else:
        forced = requested if requested in kinds else "bf16"
        if forced != requested:
            plan.notes.append(f"{requested} is not available here: bf16 instead")
        proposal, converted = {n: forced for n, u in units.items() if applies(u, forced)}, {}

    def modules(p: dict[str, str]) -> dict[str, nn.Module]:
        return {n: converted.setdefault((n, v), convert(units[n], v)) for n, v in p.items()}

    own_error: dict[str, float] = {}
    while True:
        with swapped(model, modules(proposal)):
            auc, mean_err, max_err = quality.measure(model)
        delta_ok = auc is None or quality.auc_fp32 is None or abs(auc - quality.auc_fp32) <= max_auc_drop
        if (delta_ok and mean_err <= max_score_error) or requested != "auto" or not proposal:
            break
        if not own_error:
            for n, v in proposal.items():
                with swapped(model, modules({n: v})):
                    own_error[n] = quality.measure(model)[1]
        worst = max(proposal, key=lambda n: own_error[n])
        plan.notes.append(f"{worst}: {proposal.pop(worst)} failed the quality gate, kept fp32")
    plan.auc, plan.mean_score_error, plan.max_score_error = auc, mean_err, max_err
    plan.fp32_ms, plan.plan_ms = _end_to_end(model, modules(proposal), run, device, reps)
    if not proposal:  # nothing converted: the plan is the fp32 model
        plan.plan_ms = plan.fp32_ms
    elif requested == "auto" and plan.plan_ms >= plan.fp32_ms:
        plan.notes.append(f"plan not faster end to end ({plan.plan_ms:.2f} ms vs {plan.fp32_ms:.2f} ms): all fp32")
        proposal = {}
        plan.auc, plan.mean_score_error, plan.max_score_error = quality.auc_fp32, 0.0, 0.0
        plan.plan_ms = plan.fp32_ms
    plan.layers = {n: proposal.get(n, "fp32") for n in units}
    return plan


def _end_to_end(
    model: nn.Module, modules: dict[str, nn.Module], run: Callable[[nn.Module], Any], device: torch.device, reps: int
) -> tuple[float, float]:
    """Median milliseconds of the representative request in fp32 and with ``modules`` (interleaved)."""
    fp32: list[float] = []
    planned: list[float] = []
    run(model)
    with swapped(model, modules):
        run(model)
    for _ in range(2 * reps):
        fp32.append(_timed(lambda: run(model), device))
        with swapped(model, modules):
            planned.append(_timed(lambda: run(model), device))
    return statistics.median(fp32) * 1e3, statistics.median(planned) * 1e3


def write_plan(directory: str | Path, plan: PrecisionPlan) -> Path:
    path = Path(directory) / PLAN_FILE
    path.write_text(json.dumps(asdict(plan), indent=1))
    return path


def load_plan(directory: str | Path) -> PrecisionPlan | None:
    """The plan recorded in a model directory, or ``None`` when there is none (or it is unreadable)."""
    path = Path(directory) / PLAN_FILE
    try:
        raw = json.loads(path.read_text())
        return PrecisionPlan(**raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        log.warning("%s: unusable precision plan (%s); planning again", path, exc)
        return None


def resolve_precision(
    loaded: LoadedModel, requested: str, device: torch.device, model_dir: str | None = None
) -> PrecisionPlan:
    """Apply ``requested`` to ``loaded.model`` in place: the plan recorded in ``model_dir`` for this
    request and device type if there is one, else a new plan (recorded when the directory is writable)."""
    recorded = load_plan(model_dir) if model_dir else None
    if recorded is not None and recorded.requested == requested and recorded.device == device.type:
        plan = recorded
    else:
        plan = plan_precision(loaded, requested, device)
        if model_dir and requested != "fp32":
            try:
                write_plan(model_dir, plan)
            except OSError as exc:  # a read-only model volume: the plan is still reported
                log.info("precision plan not recorded in %s: %s", model_dir, exc)
    apply_plan(loaded.model, plan.layers)
    loaded.precision = plan.summary()
    log.info("precision plan %s: %s", plan.counts(), plan.summary())
    return plan


__all__ = ["load_plan", "plan_precision", "request_runner", "resolve_precision", "swapped", "write_plan"]
