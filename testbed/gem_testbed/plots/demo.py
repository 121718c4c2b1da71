"""The demo's PNG: the load, and the replicas the operator held with the SM active it scaled on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def demo_figure(timeline: Sequence[tuple[float, float, int, int, float | None]], target: float | None = None) -> Any:
    """Load on top; replicas (desired, ready) with the SM active they were scaled on beside them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [row[0] for row in timeline]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, constrained_layout=True)
    ax1.plot(t, [row[1] for row in timeline], color="black", label="load (cost units/s)")
    ax1.set_ylabel("load")
    ax1.legend(loc="upper left", bbox_to_anchor=(1.08, 1.0), borderaxespad=0.0, fontsize=8)
    ax2.step(t, [row[3] for row in timeline], where="post", label="desired replicas")
    ax2.step(t, [row[2] for row in timeline], where="post", label="ready replicas")
    ax2.set_ylabel("replicas")
    ax2.set_xlabel("demo time (s); one trace minute per second")
    sm = ax2.twinx()
    sm.plot(
        t,
        [float("nan") if row[4] is None else row[4] for row in timeline],
        color="tab:green",
        marker=".",
        lw=1.0,
        label="SM active (mean, right axis)",
    )
    if target is not None:
        sm.axhline(target, color="tab:green", ls=":", lw=1.0, label=f"targetSmActive {target:g}")
    sm.set_ylim(0, 1.05)
    sm.set_ylabel("SM active")
    handles, labels = ax2.get_legend_handles_labels()
    more_handles, more_labels = sm.get_legend_handles_labels()
    ax2.legend(
        handles + more_handles,
        labels + more_labels,
        loc="upper left",
        bbox_to_anchor=(1.08, 1.0),
        borderaxespad=0.0,
        fontsize=8,
    )
    fig.suptitle("RankingService ads-ranker scaled on simulated DCGM_FI_PROF_SM_ACTIVE")
    return fig


def plot_demo(
    timeline: Sequence[tuple[float, float, int, int, float | None]], path: Path, target: float | None = None
) -> None:
    import matplotlib.pyplot as plt

    fig = demo_figure(timeline, target)
    fig.savefig(path, dpi=100)
    plt.close(fig)
