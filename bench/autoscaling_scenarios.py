"""The trace families of the autoscaling benches (`autoscaling_replay.py`, `autoscaling_seeds.py`).

Trace families, each drawn with a seed (the shared trace is one real draw):

- `shared-trace`: data/traces/azure-llm-2023-code.csv (1 h of real, very bursty arrivals), each
  request weighted by its ContextTokens (normalised to mean 1), scaled so that static peak
  provisioning of the duplicate series needs >= 20 replicas (the same X in both modes).
- `conversation`: 1 h of smooth conversation-like traffic (`conversation`).
- `azure-conversation`: data/traces/azure-llm-2023-conv.csv (the same service's conversation
  trace, the same hour: real, smooth arrivals), each request one unit of cost (or weighted by its
  ContextTokens: `azure_conversation(tokens=True)`), x288. One draw: the family the generated
  conversation hours stand for, and a check that they are no easier than it.
- the diurnal swing with a flash crowd: `diurnal` (24 h, optionally a 3x crowd for 2 minutes at
  11:00) and its one-hour form `poisson_hour` (rate 0.4x-1.6x, 3x crowd at minute 40).
- `wave`: a periodic swing of 5-30 minutes (`wave`), for the seed sweep only.
- `bursts`: a steady load with batch bursts of 2-5 minutes every 7-15 minutes (`bursts`), for the
  seed sweep only.
- `interruption`: a steady load that falls to 50-75 % for 10-20 minutes and comes back at once
  (`interruption`), for the seed sweep only.
- `ramp`: a load that grows steadily for 20-40 minutes to 2.2-4x where it started, then holds
  (`ramp`), for the seed sweep only.
- `step`: a steady load that steps up by 30-80 % once and stays there (`step`), for the seed sweep
  only.
- `decline`: a load that falls gradually by 45-65 % over 20-40 minutes and stays there
  (`decline`), for the seed sweep only.
- `walk`: a load whose minute rate drifts as a random walk, 0.5-2x its mean (`walk`), for the
  seed sweep only.

Synthetic traces are drawn for 1/USERS_SCALE of the users and scaled xUSERS_SCALE; in the
independent scale mode their common trend is the known per-second rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.engine import Arrivals, LoadSeries, load_trace, to_series
from gem_operator.replay.service_model import ServiceModel
from gem_operator.replay.traces import ScaleMode

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"
CONVERSATION_TRACE = ROOT / "data" / "traces" / "azure-llm-2023-conv.csv"
CONVERSATION_TRACE_SCALE = 288.0  # static peak provisioning then needs 20 replicas (independent mode)
MIN_STATIC_REPLICAS = 20
USERS_SCALE = 100.0  # synthetic traces are drawn for 1/100 of the users and scaled x100


@dataclass(frozen=True)
class Scenario:
    name: str
    arrivals: Arrivals
    trend: np.ndarray[Any, np.dtype[np.float64]] | None  # known per-second rate of the drawn trace
    scale: float
    flash: bool
    zoom: tuple[int, int] | None = None  # minutes to zoom on in the plot
    family: str = ""  # the trace family (name without the seed)
    slo_limit_pct: float = 1.0  # the SLO-minute target (3 % with a flash crowd or on the conversation family)

    def series(self, mode: ScaleMode) -> LoadSeries:
        s = to_series(self.arrivals, scale=self.scale, mode=mode, trend=self.trend if mode == "independent" else None)
        return LoadSeries(cost=s.cost, requests=s.requests, name=f"{self.name} ({mode})")


def poisson_trace(
    name: str, rate: np.ndarray[Any, np.dtype[np.float64]], mean_cost: np.ndarray[Any, np.dtype[np.float64]], seed: int
) -> tuple[Arrivals, np.ndarray[Any, np.dtype[np.float64]]]:
    """A per-second Poisson trace of 1/USERS_SCALE of the users: (arrivals, their known rate)."""
    base = rate / USERS_SCALE
    counts = np.random.default_rng(seed).poisson(base).astype(float)
    times = np.arange(len(rate), dtype=float)
    return Arrivals(times.tolist(), counts.tolist(), (counts * mean_cost).tolist(), name), base


def diurnal(flash: bool, seed: int = 7) -> Scenario:
    """24 h: 1,000-3,000 requests/s, slow noise, request mix +-15 %; optional 3x crowd at 11:00."""
    day = 86_400
    t = np.arange(day, dtype=float)
    rng = np.random.default_rng(seed)
    rate = 2000.0 - 1000.0 * np.cos(2 * np.pi * (t - 4 * 3600) / day)
    walk = np.cumsum(rng.normal(0.0, 1.0, day))
    walk = np.convolve(walk - walk.mean(), np.ones(600) / 600, mode="same")
    walk = walk / (np.abs(walk).max() or 1.0) * 0.05
    rate = rate * (1 + walk)
    if flash:
        start = 11 * 3600
        rate[start : start + 120] *= 3.0
    mean_cost = 1.0 - 0.15 * np.cos(2 * np.pi * (t - 9 * 3600) / day)
    family = "diurnal+flash" if flash else "diurnal"
    arrivals, trend = poisson_trace(family, rate, mean_cost, seed + 100)
    zoom = (11 * 60 - 10, 11 * 60 + 30) if flash else None
    return Scenario(f"{family} s{seed}", arrivals, trend, USERS_SCALE, flash, zoom, family, 3.0 if flash else 1.0)


def poisson_hour(seed: int = 11) -> Scenario:
    """1 h Poisson, rate 0.4x-1.6x of 1,100 units/s (trough at the ends, peak at minute 30), 3x crowd at minute 40."""
    t = np.arange(3600, dtype=float)
    rate = 1100.0 * (1.0 - 0.6 * np.cos(2 * np.pi * t / 3600))
    rate[40 * 60 : 42 * 60] *= 3.0
    arrivals, trend = poisson_trace("poisson-hour+flash", rate, np.ones_like(rate), seed)
    family = "poisson-hour+flash"
    return Scenario(f"{family} s{seed}", arrivals, trend, USERS_SCALE, True, (30, 55), family, 3.0)


CONVERSATION_RATE = 2400.0  # mean requests/s of the conversation family (static peak >= 20 replicas)
PEAK_TO_MEAN = 1.75  # the conversation family's busiest second against its mean rate


def conversation(seed: int = 23) -> Scenario:
    """1 h of conversation-like traffic: smooth, the per-minute rate within about +-30 % of its mean.

    The rate is the mean times 1 + 0.3 x a smooth random wave (three sinusoids with periods drawn
    between 20 and 60 minutes and random phases, scaled so the wave spans -1..1), times brief
    swells every user shares (turns of many conversations landing together: a log-normal factor
    with a 5 s memory, its spread chosen so that the busiest second's rate is PEAK_TO_MEAN = 1.75x
    the mean rate), so the minutes stay within the wave while single seconds peak well above it.
    Each request's cost is a context length drawn from a gamma distribution (mean 1, shape 2:
    long-tailed, as conversation contexts are). Poisson arrivals of 1/USERS_SCALE of the users,
    scaled xUSERS_SCALE; `seed` draws it all.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(3600, dtype=float)
    wave = np.zeros_like(t)
    for _ in range(3):
        period = rng.uniform(20 * 60, 60 * 60)
        wave += rng.uniform(0.5, 1.0) * np.sin(2 * np.pi * t / period + rng.uniform(0, 2 * np.pi))
    wave = 2 * (wave - wave.min()) / ((wave.max() - wave.min()) or 1.0) - 1
    swell = np.zeros_like(t)
    for i in range(1, len(t)):  # an AR(1) walk with a 5 s memory, unit variance
        swell[i] = swell[i - 1] * math.exp(-1 / 5) + rng.normal(0.0, math.sqrt(1 - math.exp(-2 / 5)))
    base = CONVERSATION_RATE * (1 + 0.3 * wave) / USERS_SCALE
    lo, hi = 0.0, 0.5  # the swells' spread that makes the busiest second PEAK_TO_MEAN x the mean
    for _ in range(30):
        mid = (lo + hi) / 2
        swelled = base * np.exp(mid * swell)
        lo, hi = (mid, hi) if swelled.max() < PEAK_TO_MEAN * swelled.mean() else (lo, mid)
    rate = base * np.exp(lo * swell)
    counts = rng.poisson(rate).astype(float)
    costs = np.array([rng.gamma(2.0, 0.5, int(n)).sum() for n in counts])
    arrivals = Arrivals(t.tolist(), counts.tolist(), costs.tolist(), "conversation")
    return Scenario(f"conversation s{seed}", arrivals, rate, USERS_SCALE, False, None, "conversation", 3.0)


WAVE_RATE = 2000.0  # mean requests/s of the wave family (static peak >= 20 replicas)


def wave(seed: int = 41) -> Scenario:
    """1 h of a periodic swing: the rate is 2,000/s x (1 + a sin(2 pi t / P + phase)), P drawn between
    5 and 30 minutes, a between 0.2 and 0.4 (Poisson arrivals, unit cost).

    A load that turns faster than the scale-down window and a few pod starts: a line through its
    rising half forecasts a rise that the falling half takes back, and a pool that follows it
    spends a direction change per half-period. None of the other families turns within minutes.
    """
    rng = np.random.default_rng(seed)
    period, amplitude, phase = rng.uniform(5 * 60, 30 * 60), rng.uniform(0.2, 0.4), rng.uniform(0, 2 * np.pi)
    t = np.arange(3600, dtype=float)
    rate = WAVE_RATE * (1 + amplitude * np.sin(2 * np.pi * t / period + phase))
    arrivals, trend = poisson_trace("wave", rate, np.ones_like(rate), seed)
    name = f"wave s{seed} ({period / 60:.0f} min, +-{amplitude:.0%})"
    return Scenario(name, arrivals, trend, USERS_SCALE, False, None, "wave", 3.0)


BURST_RATE = 1200.0  # requests/s between the bursts family's bursts (static peak >= 20 replicas)


def bursts(seed: int = 61) -> Scenario:
    """1 h of a steady 1,200/s with batch bursts: each 2-5 minutes at 1.5-2x, 7-15 minutes apart
    (the first within 5 minutes), Poisson arrivals, unit cost; `seed` draws the bursts.

    Steps, not ramps: a bulk job (a re-rank of the catalogue, a campaign launch) starts and stops.
    Each burst returns within the 15-minute scale-down window; a pool that gives its capacity back
    between bursts meets each one with a pod start. For the seed sweep only: none of the other
    families steps.
    """
    rng = np.random.default_rng(seed)
    rate = np.full(3600, BURST_RATE)
    start = rng.uniform(0, 300)
    while start < 3600:
        length = rng.uniform(120, 300)
        rate[int(start) : int(start + length)] *= rng.uniform(1.5, 2.0)
        start += length + rng.uniform(420, 900)
    arrivals, trend = poisson_trace("bursts", rate, np.ones_like(rate), seed)
    return Scenario(f"bursts s{seed}", arrivals, trend, USERS_SCALE, False, None, "bursts", 3.0)


INTERRUPTION_RATE = 2400.0  # requests/s of the interruption family's level (static peak >= 20 replicas)


def interruption(seed: int = 81) -> Scenario:
    """1 h of a steady 2,400/s that falls to 50-75 % of it at a second drawn between minutes 10 and
    40, stays there 10-20 minutes and comes back at once (Poisson arrivals, unit cost).

    An interruption, not a new level: an upstream caller paused, a client fleet rolled back, a
    region drained for a deploy. The load that left comes back as a step, faster than a pod
    starts. For the seed sweep only: no other family falls from a level it has held.
    """
    rng = np.random.default_rng(seed)
    rate = np.full(3600, INTERRUPTION_RATE)
    start = int(rng.uniform(600, 2400))
    end = int(start + rng.uniform(600, 1200))
    rate[start:end] *= rng.uniform(0.5, 0.75)
    arrivals, trend = poisson_trace("interruption", rate, np.ones_like(rate), seed)
    return Scenario(f"interruption s{seed}", arrivals, trend, USERS_SCALE, False, None, "interruption", 3.0)


RAMP_RATE = 2000.0  # requests/s at 1x of the ramp family (static peak >= 20 replicas)


def ramp(seed: int = 101) -> Scenario:
    """1 h of a load that grows steadily and then holds: 2,000/s x a level that rises linearly from
    0.4-0.6 to 1.3-1.6 over 20-40 minutes, starting between minutes 5 and 15, with a +-5 % swing of
    1-4 minutes on top (Poisson arrivals, unit cost).

    A morning's rise compressed into half an hour: demand that keeps growing for many pod starts
    and then stops growing. The ramp lead orders a lead ahead of it, HPA follows inside its
    tolerance band; no other family rises for longer than a swell.
    """
    rng = np.random.default_rng(seed)
    start, length = rng.uniform(300, 900), rng.uniform(1200, 2400)
    low, high = rng.uniform(0.4, 0.6), rng.uniform(1.3, 1.6)
    period = rng.uniform(60, 240)
    t = np.arange(3600, dtype=float)
    level = low + (high - low) * np.clip((t - start) / length, 0.0, 1.0)
    rate = RAMP_RATE * level * (1 + 0.05 * np.sin(2 * np.pi * t / period))
    arrivals, trend = poisson_trace("ramp", rate, np.ones_like(rate), seed)
    name = f"ramp s{seed} ({low:.1f}x -> {high:.1f}x over {length / 60:.0f} min)"
    return Scenario(name, arrivals, trend, USERS_SCALE, False, None, "ramp", 3.0)


STEP_RATE = 1500.0  # requests/s before the step family's step (static peak >= 20 replicas)


def step(seed: int = 121) -> Scenario:
    """1 h of a steady 1,500/s that steps up by 30-80 % at a second drawn between minutes 10 and 40
    and stays there (Poisson arrivals, unit cost).

    A new level, not a burst: a client fleet onboarded, traffic shifted from another region. The
    pool meets it a pod start late whatever it does; what differs is how soon it settles at the
    new level and what it holds once there.
    """
    rng = np.random.default_rng(seed)
    at, factor = int(rng.uniform(600, 2400)), rng.uniform(1.3, 1.8)
    rate = np.full(3600, STEP_RATE)
    rate[at:] *= factor
    arrivals, trend = poisson_trace("step", rate, np.ones_like(rate), seed)
    return Scenario(
        f"step s{seed} (x{factor:.2f} at minute {at / 60:.0f})", arrivals, trend, USERS_SCALE, False, None, "step", 3.0
    )


DECLINE_RATE = 2600.0  # requests/s before the decline family's fall (static peak >= 20 replicas)


def decline(seed: int = 141) -> Scenario:
    """1 h of a steady 2,600/s that falls linearly to 35-55 % of it over 20-40 minutes, starting
    between minutes 5 and 15, and stays there (Poisson arrivals, unit cost).

    An evening's fall compressed into half an hour: the ramp family run backwards. What it judges
    is how soon a pool gives back what the load no longer needs, pod by pod, where HPA follows the
    fall a down window late. The other falls come back (a swing, an interruption), come at once, or
    carry a flash crowd (the Poisson hour's second half).
    """
    rng = np.random.default_rng(seed)
    start, length, floor = rng.uniform(300, 900), rng.uniform(1200, 2400), rng.uniform(0.35, 0.55)
    t = np.arange(3600, dtype=float)
    rate = DECLINE_RATE * (1 - (1 - floor) * np.clip((t - start) / length, 0.0, 1.0))
    arrivals, trend = poisson_trace("decline", rate, np.ones_like(rate), seed)
    name = f"decline s{seed} (to {floor:.2f}x over {length / 60:.0f} min)"
    return Scenario(name, arrivals, trend, USERS_SCALE, False, None, "decline", 3.0)


WALK_RATE = 2000.0  # mean requests/s of the walk family (static peak >= 20 replicas)
WALK_STEP = 0.07  # spread of the log rate's change from one minute to the next


def walk(seed: int = 161) -> Scenario:
    """1 h of a drifting load: the minute rate is a geometric random walk (log steps of spread
    `WALK_STEP`), scaled to a mean of 2,000/s, held within 0.5-2x of it and interpolated per second
    (Poisson arrivals, unit cost).

    Neither a swing nor a ramp: the walk's steps are independent, so a line fitted to the last
    minutes extrapolates a trend the next minutes do not keep. It judges a policy on a load it
    cannot predict, where every family above has a shape.
    """
    rng = np.random.default_rng(seed)
    level = np.exp(np.cumsum(rng.normal(0.0, WALK_STEP, 61)))
    level = np.clip(level / level.mean(), 0.5, 2.0)
    t = np.arange(3600, dtype=float)
    rate = WALK_RATE * np.interp(t / 60.0, np.arange(61, dtype=float), level)
    arrivals, trend = poisson_trace("walk", rate, np.ones_like(rate), seed)
    return Scenario(f"walk s{seed}", arrivals, trend, USERS_SCALE, False, None, "walk", 3.0)


def shared_trace(model: ServiceModel, spec: RankingServiceSpec) -> Scenario:
    arrivals = load_trace(SHARED_TRACE, cost_column="ContextTokens")
    unit = to_series(arrivals, scale=1.0, mode="duplicate")
    per_replica = model.utilisation_for_sm(spec.autoscaling.target_sm_active) * model.throughput_per_replica
    scale = math.ceil(MIN_STATIC_REPLICAS * per_replica / float(unit.cost.max()))
    return Scenario("shared-trace", arrivals, None, float(scale), False, (8, 30), "shared-trace", 1.0)


def azure_conversation(tokens: bool = False) -> Scenario:
    """The real conversation hour, x288; each request one unit of cost, or its ContextTokens (mean 1)."""
    arrivals = load_trace(CONVERSATION_TRACE, cost_column="ContextTokens" if tokens else None)
    name = "azure-conversation" + (" (tokens)" if tokens else "")
    return Scenario(name, arrivals, None, CONVERSATION_TRACE_SCALE, False, None, "azure-conversation", 3.0)
