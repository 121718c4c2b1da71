"""The replay's PNG: load, replicas per pool, p99 per minute against the SLO (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gem_operator.replay.report import HPA_RPS, POLICY, STATIC_PEAK, ReplayReport


def plot_report(
    report: ReplayReport,
    path: str | Path,
    title: str | None = None,
    zoom: tuple[int, int] | None = None,
) -> Path:
    """Write a PNG: load, replicas per pool, p99 per minute vs the SLO.

    `zoom` = (first minute, last minute) adds a bottom row showing replicas and p99 in that window
    (e.g. around a flash crowd in a day-long run).
    """
    import matplotlib.pyplot as plt

    fig = replay_figure(report, title, zoom)
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _outside_legend(ax: Any) -> None:
    """Legends beside the plot, never over the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)


def replay_figure(report: ReplayReport, title: str | None = None, zoom: tuple[int, int] | None = None) -> Any:
    """The figure `plot_report` writes (a matplotlib Figure; the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = np.arange(report.minutes)
    hours_axis = report.minutes > 180
    x = minutes / 60 if hours_axis else minutes
    xlabel = "time (hours)" if hours_axis else "time (minutes)"
    colours = {POLICY: "tab:blue", HPA_RPS: "tab:orange", STATIC_PEAK: "tab:gray"}
    labels = {POLICY: "SM-active policy", HPA_RPS: "HPA on RPS", STATIC_PEAK: "static peak"}
    order = (STATIC_PEAK, HPA_RPS, POLICY)
    rows = 4 if zoom else 3
    fig = plt.figure(figsize=(11, 3 * rows), constrained_layout=True)
    axes = fig.subplots(rows, 1)
    for ax in axes[1:3]:
        ax.sharex(axes[0])

    ax = axes[0]
    ax.plot(x, report.load_per_minute, color="black", lw=1.2, label="load (cost units/s)")
    ax.plot(x, report.requests_per_minute, color="tab:green", lw=0.8, ls="--", label="requests/s")
    ax.set_ylabel("load per second")
    _outside_legend(ax)
    ax.set_title(title or f"{report.trace} x{report.scale:g} -> RankingService {report.service}")

    ax = axes[1]
    for k in order:
        r = report.results[k]
        ax.plot(
            x,
            r.replicas_per_minute,
            color=colours[k],
            lw=1.4 if k == POLICY else 1.0,
            label=f"{labels[k]}: {r.gpu_hours:.1f} GPU-h",
        )
    if report.max_replicas is not None:
        ax.axhline(report.max_replicas, color="red", ls=":", lw=1.0, label=f"maxReplicas {report.max_replicas}")
    ax.set_ylabel("replicas (GPUs held)")
    _outside_legend(ax)

    ax = axes[2]
    for k in order:
        r = report.results[k]
        y = [np.nan if v is None else v for v in r.p99_ms_per_minute]
        ax.plot(
            x,
            y,
            color=colours[k],
            lw=1.4 if k == POLICY else 1.0,
            label=f"{labels[k]}: {r.slo_violation_minutes} min over SLO",
        )
    ax.axhline(report.slo_ms, color="red", ls=":", lw=1.2, label=f"SLO p99 {report.slo_ms:g} ms")
    ax.set_yscale("log")
    ax.set_ylabel("p99 per minute (ms)")
    ax.set_xlabel(xlabel)
    _outside_legend(ax)

    if zoom:
        lo, hi = max(0, zoom[0]), min(report.minutes, zoom[1])
        zx = np.arange(lo, hi)
        ax = axes[3]
        twin = ax.twinx()
        for k in order:
            r = report.results[k]
            ax.step(
                zx,
                r.replicas_per_minute[lo:hi],
                where="post",
                color=colours[k],
                lw=1.4 if k == POLICY else 1.0,
                label=f"{labels[k]} replicas",
            )
            y = [np.nan if v is None else v for v in r.p99_ms_per_minute[lo:hi]]
            twin.plot(zx, y, color=colours[k], ls="--", marker=".", lw=0.9)
        twin.axhline(report.slo_ms, color="red", ls=":", lw=1.2)
        twin.set_yscale("log")
        twin.set_ylabel("p99 per minute (ms, dashed)")
        load = np.asarray(report.load_per_minute[lo:hi])
        peak = max(1.0, float(load.max()))
        ax.fill_between(
            zx,
            0,
            load / peak * max(r.peak_replicas for r in report.results.values()),
            color="black",
            alpha=0.08,
            step="post",
            label="load (scaled)",
        )
        ax.set_ylabel("replicas (solid)")
        ax.set_xlabel(f"minute of the run (zoom on minutes {lo}-{hi})")
        _outside_legend(ax)
    return fig


__all__ = ["plot_report", "replay_figure"]
