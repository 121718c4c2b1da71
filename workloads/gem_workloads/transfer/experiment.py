"""The transfer evaluation: foundation model, then vertical variants, all scored on the later split.

Steps (one process, CPU-sized):

1. Split the examples in time (:func:`~gem_workloads.data.timeline.time_split`).
2. Train the foundation model (Kunlun-style, long history, multi-task) on the first
   ``foundation_fraction`` of the training examples (in time): the later training examples are
   ones it never saw, so their exact Solaris embeddings carry no memorised label, as in
   production, where the exact embedding is computed before the impression happens.
3. One foundation pass over *all* examples (soft labels, LoopFM representations, Solaris
   embeddings: inference only, no label is read), as the batch job and the precompute workers
   would produce them in production; evaluation examples only ever see memory and fallback
   embeddings from before their own time.
4. Train the vertical variants on the earlier examples: ``alone`` (hard labels), ``kd`` (soft +
   hard), ``kd+loopfm`` (plus the memory input), ``kd+loopfm+solaris`` (plus the Solaris input,
   trained with coverage simulation), and score them on the later examples; the Solaris variant
   at exact coverage 100/70/40/0 % with fallback tiers and with drop.

The LoopFM transfer ratio is ``(AUC[kd+loopfm] - AUC[alone]) / (AUC[kd] - AUC[alone])`` on the
AUC averaged over tasks; the gap closed is ``(AUC[v] - AUC[alone]) / (AUC[foundation] - AUC[alone])``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..data.blocks import cap_schema
from ..data.catalog import load_dataset
from ..data.timeline import TimelineConfig, time_split
from ..models import build_model, get_preset
from ..models.devices import resolve_device
from ..models.kunlun import KunlunModel
from ..models.loopfm import representation_width
from ..models.presets import ModelConfig
from ..training.coverage import assign_tiers, tier_shares, tier_sources
from ..training.distill import ExampleFeed, FitConfig, fit, predict, task_aucs
from ..training.foundation_pass import run_pass

COVERAGES = (1.0, 0.7, 0.4, 0.0)
ALONE, KD, LOOPFM, SOLARIS = "alone", "kd", "kd+loopfm", "kd+loopfm+solaris"


@dataclass
class EvalConfig:
    data: str = "synthetic"
    seed: int = 0
    foundation_preset: str = "foundation"
    vertical_preset: str = "vertical"
    foundation_epochs: int = 4
    vertical_epochs: int = 3
    batch_size: int = 256
    foundation_lr: float = 4e-3
    vertical_lr: float = 3e-3
    kd_weight: float = 0.2
    memory_len: int = 16
    eval_fraction: float = 0.2
    foundation_fraction: float = 0.7
    coverages: tuple[float, ...] = COVERAGES
    synthetic: TimelineConfig = field(default_factory=TimelineConfig)
    foundation_overrides: dict[str, Any] = field(default_factory=dict)
    vertical_overrides: dict[str, Any] = field(default_factory=dict)
    device: str | None = None  # --device; default $GEM_DEVICE, else cuda when present, else cpu


def coverage_name(coverage: float, drop: bool = False) -> str:
    return f"{SOLARIS}@{round(coverage * 100)}%" + ("-drop" if drop else "")


def mean_auc(aucs: dict[str, float]) -> float:
    return float(np.mean(list(aucs.values()))) if aucs else float("nan")


def run(cfg: EvalConfig, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    t_start = time.perf_counter()
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    data = load_dataset(cfg.data, cfg.seed, cfg.synthetic)
    split = time_split(data, cfg.eval_fraction)
    fcfg: ModelConfig = get_preset(cfg.foundation_preset).with_(**cfg.foundation_overrides)
    vbase: ModelConfig = get_preset(cfg.vertical_preset).with_(**cfg.vertical_overrides)
    schema = cap_schema(data.schema, fcfg.max_table_rows)
    tasks = [t.name for t in schema.tasks]
    log(f"{cfg.data}: {len(split.train)} train / {len(split.eval)} eval examples (cut at t={split.cut:.3f})")

    def fit_cfg(epochs: int, lr: float, kd: float = 0.0) -> FitConfig:
        return FitConfig(epochs=epochs, batch_size=cfg.batch_size, lr=lr, seed=cfg.seed, kd_weight=kd)

    # 2. The foundation model.
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    foundation = build_model("kunlun", fcfg, schema).to(device)
    assert isinstance(foundation, KunlunModel)
    train_times = data.ev_time[split.train]
    seen = train_times < np.quantile(train_times, cfg.foundation_fraction)  # the foundation model's examples
    fit(
        foundation,
        ExampleFeed(data, split.train[seen], schema, fcfg.seq_len),
        fit_cfg(cfg.foundation_epochs, cfg.foundation_lr),
        device=device,
    )
    f_aucs = task_aucs(*predict(foundation, ExampleFeed(data, split.eval, schema, fcfg.seq_len), device=device), tasks)
    log(f"foundation: {f_aucs} ({time.perf_counter() - t0:.0f}s)")

    # 3. One pass over every example.
    t0 = time.perf_counter()
    every = np.sort(np.concatenate([split.train, split.eval]))
    fpass = run_pass(foundation, data, every, f"foundation-seed{cfg.seed}", device=device)
    sources = tier_sources(fpass.user, fpass.time, fpass.item, fpass.group, fpass.bucket)
    log(f"foundation pass: {len(fpass.rows)} examples ({time.perf_counter() - t0:.0f}s)")

    # 4. The vertical variants.
    width = representation_width(foundation)
    specs = {
        ALONE: (vbase, 0.0),
        KD: (vbase, cfg.kd_weight),
        LOOPFM: (vbase.with_(memory_len=cfg.memory_len, memory_width=width), cfg.kd_weight),
        SOLARIS: (
            vbase.with_(memory_len=cfg.memory_len, memory_width=width, solaris_width=foundation.embedding_size),
            cfg.kd_weight,
        ),
    }
    variants: dict[str, dict[str, float]] = {}
    shares: dict[str, dict[str, float]] = {}
    for name, (vcfg, kd) in specs.items():
        t0 = time.perf_counter()
        torch.manual_seed(cfg.seed)
        model = build_model("vertical", vcfg, schema).to(device)

        def feed(
            rows: np.ndarray, allowed: np.ndarray | None = None, vcfg: ModelConfig = vcfg, kd: float = kd
        ) -> ExampleFeed:
            uses = kd > 0 or vcfg.memory_len > 0 or vcfg.solaris_width > 0
            return ExampleFeed(data, rows, schema, vcfg.seq_len, fpass if uses else None, vcfg.memory_len,
                               vcfg.solaris_width > 0, sources, allowed)  # fmt: skip

        fit(model, feed(split.train, ~seen), fit_cfg(cfg.vertical_epochs, cfg.vertical_lr, kd), device=device)
        eval_feed = feed(split.eval)
        if name != SOLARIS:
            variants[name] = task_aucs(*predict(model, eval_feed, device=device), tasks)
        else:
            assert eval_feed.sources is not None
            for cov in cfg.coverages:
                for drop in (False, True) if cov < 1.0 else (False,):
                    rng = np.random.default_rng([cfg.seed, 99, round(cov * 100)])  # same draws with and without drop
                    tier = assign_tiers(eval_feed.sources, cov, 0.0 if drop else 1.0, rng)
                    key = coverage_name(cov, drop)
                    variants[key] = task_aucs(*predict(model, eval_feed, tier, device=device), tasks)
                    shares[key] = tier_shares(tier)
        log(f"{name}: {[(k, round(mean_auc(v), 4)) for k, v in variants.items() if k.startswith(name)]} "
            f"({time.perf_counter() - t0:.0f}s)")  # fmt: skip

    alone, kd_auc, loop = (mean_auc(variants[k]) for k in (ALONE, KD, LOOPFM))
    f_mean = mean_auc(f_aucs)
    ratio = (loop - alone) / (kd_auc - alone) if kd_auc != alone else float("nan")
    gap = f_mean - alone
    closed = {k: (mean_auc(v) - alone) / gap if gap else float("nan") for k, v in variants.items()}
    return {
        "data": cfg.data,
        "seed": cfg.seed,
        "examples": {"train": len(split.train), "foundation_train": int(seen.sum()), "eval": len(split.eval)},
        "foundation": f_aucs,
        "variants": variants,
        "mean_auc": {"foundation": round(f_mean, 5), **{k: round(mean_auc(v), 5) for k, v in variants.items()}},
        "loopfm_transfer_ratio": round(ratio, 4),
        "gap_closed": {k: round(v, 4) for k, v in closed.items()},
        "tier_shares": shares,
        "foundation_version": fpass.version,
        "loopfm": {"width": width, "memory_len": cfg.memory_len},
        "solaris_width": foundation.embedding_size,
        "seconds": round(time.perf_counter() - t_start, 1),
    }
