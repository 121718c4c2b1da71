"""Selective low precision for serving: a per-layer plan chosen by micro-benchmark and a quality gate.

The model's dense units (``dense_units()``: block attention layers, summarisers, interactions,
heads, ...) are the layers a plan assigns a precision to:

* ``fp32`` — as trained;
* ``bf16`` — the unit's weights and inputs in bfloat16, its outputs cast back to float32;
* ``int8`` — CPU only: dynamic quantisation of the unit's ``nn.Linear`` layers (int8 weights,
  activations quantised per batch; ``torch.ao.quantization.quantize_dynamic``);
* ``fp8`` — CUDA GPUs of compute capability 8.9 or newer with torchao installed: float8 weights
  and dynamically scaled float8 activations in the unit's linear layers (torchao), bf16 elsewhere.

``plan_precision`` (``--precision auto``) builds the plan in three steps:

1. *Micro-benchmark*: one representative request (``candidates`` candidates, full history) runs
   through the fp32 model while forward hooks record every unit's inputs; each unit is then
   timed alone in each precision the device offers, and a precision is proposed for the unit
   when it is at least ``min_speedup`` faster than fp32 there.
2. *Quality gate* on a holdout (synthetic examples with labels when the model's schema is the
   synthetic one): per-task AUC and the probabilities of the planned model against fp32. While
   the AUC drops by more than ``max_auc_drop`` or the mean score error exceeds
   ``max_score_error``, the proposal whose own error is largest goes back to fp32.
3. *End to end*: the request is timed with the whole plan against fp32 (interleaved); a plan
   that is not faster is dropped (all fp32), so planning never makes serving slower.

``--precision bf16|fp8`` forces that precision on every unit (fp8 falls back to bf16 where the
device cannot run it) and reports the same quality numbers; ``fp32`` changes nothing. The
plan is recorded as ``gem-precision.json`` in the model directory (:func:`write_plan`) and
reused by the servers of that pod (:func:`load_plan`).
"""

from __future__ import annotations

import copy
import importlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.blocks import cap_schema
from ..data.mixing import MixingLoader
from ..data.synthetic import SyntheticConfig, SyntheticUniverse
from ..models.features import Batch
from ..models.model_dir import LoadedModel

PRECISIONS = ("auto", "fp32", "bf16", "fp8")
PLAN_FILE = "gem-precision.json"


@dataclass
class PrecisionPlan:
    """What :func:`plan_precision` chose and measured (``layers``: unit name -> precision)."""

    requested: str
    device: str
    layers: dict[str, str] = field(default_factory=dict)
    auc_fp32: float | None = None
    auc: float | None = None
    mean_score_error: float = 0.0
    max_score_error: float = 0.0
    fp32_ms: float | None = None
    plan_ms: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def auc_delta(self) -> float | None:
        return None if self.auc is None or self.auc_fp32 is None else self.auc - self.auc_fp32

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.layers.values():
            out[p] = out.get(p, 0) + 1
        return dict(sorted(out.items()))

    def summary(self) -> dict[str, Any]:
        """The short form servers report and the operator shows in status."""
        delta = self.auc_delta
        speedup = self.fp32_ms / self.plan_ms if self.fp32_ms and self.plan_ms else None
        return {
            "requested": self.requested,
            "device": self.device,
            "layers": self.counts(),
            "aucDelta": None if delta is None else round(delta, 6),
            "meanScoreError": round(self.mean_score_error, 6),
            "speedup": None if speedup is None else round(speedup, 3),
        }


def offered(device: torch.device) -> tuple[list[str], list[str]]:
    """(precisions this device can run besides fp32, why the others are not offered)."""
    notes: list[str] = []
    if device.type != "cuda":
        return ["int8", "bf16"], ["fp8: needs a CUDA GPU of compute capability >= 8.9"]
    out = ["bf16"]
    if torch.cuda.get_device_capability(device) < (8, 9):
        notes.append("fp8: compute capability below 8.9")
    elif _torchao() is None:
        notes.append("fp8: torchao is not installed")
    else:
        out.append("fp8")
    return out, notes


def _torchao() -> Any:
    """torchao's quantization API, or ``None`` where torchao is not installed (an optional dependency)."""
    try:
        return importlib.import_module("torchao.quantization")
    except ImportError:
        return None


class Cast(nn.Module):
    """Runs ``inner`` in ``dtype``: floating inputs cast in, floating outputs cast back to float32."""

    def __init__(self, inner: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.inner, self.dtype = inner, dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        args = tuple(_cast(a, self.dtype) for a in args)
        kwargs = {k: _cast(v, self.dtype) for k, v in kwargs.items()}
        out = self.inner(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(_cast(o, torch.float32) for o in out)
        return _cast(out, torch.float32)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def convert(unit: nn.Module, precision: str) -> nn.Module:
    """A copy of ``unit`` that runs in ``precision`` (the original is left as it is)."""
    if precision == "fp32":
        return unit
    clone = copy.deepcopy(unit)
    if precision == "bf16":
        return Cast(clone.to(torch.bfloat16), torch.bfloat16)
    if precision == "int8":
        from torch.ao.quantization import quantize_dynamic

        quantized: nn.Module = quantize_dynamic(clone, {nn.Linear}, dtype=torch.qint8)  # type: ignore[no-untyped-call]
        return quantized
    if precision == "fp8":
        ao = _torchao()
        clone = clone.to(torch.bfloat16)
        # float8 matmuls need both dims divisible by 16; other linears stay bf16.
        ao.quantize_(
            clone,
            ao.Float8DynamicActivationFloat8WeightConfig(),
            filter_fn=lambda m, _: isinstance(m, nn.Linear) and m.in_features % 16 == 0 and m.out_features % 16 == 0,
        )
        return Cast(clone, torch.bfloat16)
    raise ValueError(f"unknown precision {precision!r}; choose one of fp32, bf16, int8, fp8")


def unit_names(model: nn.Module) -> dict[str, nn.Module]:
    """The model's dense units by their module path (the layers a plan names)."""
    ids = {id(u) for u in model.dense_units()}  # type: ignore[operator]
    return {name: m for name, m in model.named_modules() if id(m) in ids and any(True for _ in m.parameters())}


def applies(unit: nn.Module, precision: str) -> bool:
    """Whether ``precision`` changes anything in ``unit`` (int8 and fp8 convert linear layers only)."""
    if precision in ("int8", "fp8"):
        return any(isinstance(m, nn.Linear) for m in unit.modules())
    return precision != "fp32"


def replace_unit(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


def apply_plan(model: nn.Module, layers: dict[str, str]) -> None:
    """Convert ``model``'s units in place as ``layers`` says (unknown names fail loudly)."""
    units = unit_names(model)
    unknown = sorted(set(layers) - set(units))
    if unknown:
        raise ValueError(f"precision plan names units the model does not have: {unknown}")
    for name, precision in layers.items():
        if precision != "fp32":
            replace_unit(model, name, convert(units[name], precision))


def synthetic_holdout(
    loaded: LoadedModel, examples: int, device: torch.device, seed: int = 7
) -> tuple[list[Batch], bool]:
    """Labelled synthetic examples when the model reads the synthetic schema, else unlabelled ones are not made."""
    cfg = loaded.config
    universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=seed))
    schema = cap_schema(universe.schema, cfg.max_table_rows)
    if schema != loaded.schema:
        return [], False
    n_domains = len(schema.domains)
    batch = min(examples, 512)
    loader = MixingLoader(
        [universe.domain(i) for i in range(n_domains)], [1] * n_domains, batch, seed=seed, schema=schema
    )
    return [loader.batch(i).to(device) for i in range(max(1, examples // batch))], True


def _timed(fn: Callable[[], Any], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def _median_time(fn: Callable[[], Any], device: torch.device, reps: int) -> float:
    fn()  # warm-up
    return statistics.median(_timed(fn, device) for _ in range(reps))


Inputs = dict[str, tuple[tuple[Any, ...], dict[str, Any]]]


def _unit_inputs(model: nn.Module, run: Callable[[nn.Module], Any]) -> Inputs:
    """Every unit's (args, kwargs) of its first call while ``run(model)`` runs."""
    seen: Inputs = {}
    hooks = []
    for name, unit in unit_names(model).items():

        def record(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], name: str = name) -> None:
            seen.setdefault(name, (args, kwargs))

        hooks.append(unit.register_forward_pre_hook(record, with_kwargs=True))
    try:
        run(model)
    finally:
        for h in hooks:
            h.remove()
    return seen


def _auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    pos = int(labels.sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return None
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - counts + (counts + 1) / 2.0)[inverse]  # ties share their mean rank
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def holdout_scores(model: nn.Module, holdout: list[Batch]) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([torch.sigmoid(model(b).float()).cpu() for b in holdout])


def mean_auc(probs: torch.Tensor, holdout: list[Batch]) -> float | None:
    """Mean over tasks of the AUC on labelled rows (tasks with one class only are skipped)."""
    labels = torch.cat([b.labels.cpu() for b in holdout]).numpy() > 0.5
    mask = torch.cat([b.label_mask.cpu() for b in holdout]).numpy() > 0
    values = [_auc(probs[:, t].numpy()[mask[:, t]], labels[mask[:, t], t]) for t in range(probs.shape[1])]
    found = [v for v in values if v is not None]
    return float(np.mean(found)) if found else None


__all__ = [
    "PLAN_FILE",
    "PRECISIONS",
    "Cast",
    "PrecisionPlan",
    "applies",
    "apply_plan",
    "convert",
    "holdout_scores",
    "mean_auc",
    "offered",
    "replace_unit",
    "synthetic_holdout",
    "unit_names",
]
