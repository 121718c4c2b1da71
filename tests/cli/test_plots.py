"""Plots a person reads: the replay marks maxReplicas and keeps legends off the data; the demo shows
SM active beside the replicas it drove."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from gem_operator.replay.engine import run_replay
from gem_testbed.plots.demo import demo_figure
from gem_testbed.plots.replay import replay_figure

SERVICE = """\
apiVersion: gem.dev/v1alpha1
kind: RankingService
metadata: {name: rks}
spec:
  model: {uri: s3://m/v1}
  slo: {p99LatencyMs: 40}
  autoscaling: {minReplicas: 1, maxReplicas: 9, targetSmActive: 0.6}
"""


def _legends_off_the_data(fig: Any) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for other in fig.axes:
            assert not box.overlaps(other.get_window_extent(renderer)), f"legend of {ax.get_ylabel()!r} over data"


def test_replay_plot_marks_max_replicas_and_keeps_legends_outside(tmp_path: Path) -> None:
    service = tmp_path / "rks.yaml"
    service.write_text(SERVICE)
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"t": t, "count": 900, "cost": 900}) + "\n" for t in range(1200)))
    report = run_replay(trace, service, smooth_seconds=1)
    assert report.max_replicas == 9
    fig = replay_figure(report)
    try:
        replicas_ax = next(ax for ax in fig.axes if ax.get_ylabel().startswith("replicas"))
        (line,) = [ln for ln in replicas_ax.get_lines() if ln.get_label() == "maxReplicas 9"]
        assert set(line.get_ydata()) == {9}
        _legends_off_the_data(fig)
    finally:
        plt.close(fig)


def test_demo_plot_shows_sm_active_beside_replicas() -> None:
    timeline = [(float(t), 100.0 + 10 * t, 2 + t // 4, 2 + t // 3, None if t == 0 else 0.5 + t / 40) for t in range(12)]
    fig = demo_figure(timeline, target=0.6)
    try:
        sm_ax = next(ax for ax in fig.axes if ax.get_ylabel() == "SM active")
        (sm,) = [ln for ln in sm_ax.get_lines() if ln.get_label().startswith("SM active")]
        assert list(sm.get_ydata())[1:] == [row[4] for row in timeline[1:]]
        assert any(ln.get_label() == "targetSmActive 0.6" for ln in sm_ax.get_lines())
        _legends_off_the_data(fig)
    finally:
        plt.close(fig)
