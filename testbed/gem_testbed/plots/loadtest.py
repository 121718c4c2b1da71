"""`gemop loadtest --plot`: replicas held and client p99 per minute, one line per pool."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gem_operator.replay.report import POLICY


def plot_loadtest(report: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pools = [POLICY, *report.get("baselines", {})] if report.get("policy") else [*report.get("baselines", {})]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    rows = report["timeline"]
    for pool in pools:
        minutes = [row["minute"] for row in rows if pool in row]
        ax1.plot(minutes, [row[pool]["replicas"] for row in rows if pool in row], label=pool)
        ax2.plot(minutes, [row[pool]["p99_ms"] or float("nan") for row in rows if pool in row], label=pool)
    ax2.axhline(report["slo_p99_ms"], color="red", linestyle="--", label="SLO")
    ax1.set_ylabel("replicas held")
    ax2.set_ylabel("client p99 (ms)")
    ax2.set_xlabel("minute")
    ax1.legend()
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
