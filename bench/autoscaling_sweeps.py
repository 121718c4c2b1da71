"""The sets of autoscaling seed sweeps a policy change is judged on, in one command, side by side.

Run:  python bench/autoscaling_sweeps.py [SET ...] [--jobs N] [--out DIR] [--set KEY=VALUE ...]
      python bench/autoscaling_sweeps.py --compare OLD NEW

docs/benchmarks.md judges each change to the policy on the same sets of `bench/autoscaling_seeds.py`
sweeps, so that a rule tuned on one family shows what it costs on the others:

- `bench` (250 cases): the bench's eight sweeps (the flash-crowd and conversation hours, the
  shared trace and the real conversation hour, on the bench's service, the single-server fleet and
  the sample service; waves) and the bursts family at seeds 0-7;
- `held-out` (304): bursts, waves and flash hours at seeds 100-107, conversation at 60-75, the
  interruption, step and ramp families, and bursts on the sample service and the slow-start and
  single-server fleets;
- `unseen-fleets` (64): the four fleets no rule was tuned on x four families at seeds 400-401;
- `new-seeds` (72): every family at seeds 800-803, which no rule has seen;
- `decline-walk` (160): the two families no rule was written for, on the bench's service, the
  sample service and the single-server and slow-start fleets;
- `start-ups` (72): the bench's fleet with pods that serve 45 s, 70 s and 3 minutes after they are
  ordered (the bench's own take 2 minutes) x six families at seeds 500-501: the ramp lead and the
  SLO loop's freezes are timed by the pool's start-up, and a rule that holds at one start-up may not
  at another;
- `far-seeds` (168): every family at seeds 1300-1303, and every fleet but the bench's x the
  conversation, wave, step and walk families at seeds 1300-1301 (the unseen fleets had never run a
  step or a walk): measured once the rules above were kept, where none of them was tuned.

Each sweep runs as its own process (`--jobs` at a time, by default one per CPU) and writes its
counts with `--json`. Printed: per sweep and per set, the cases, how many the policy had more
violation minutes than HPA on RPS at equal GPU-hours in ("worse"), how many it spent over 1.05x
RPS's GPU-hours at as few violation minutes in ("dearer"), the violation minutes on both sides,
the cases over 0.75 of static GPU-hours (in brackets: of them, those where no reactive oracle keeps
the SLO-minute target within 0.75) and the cases that meet every target. `--out DIR` keeps each
sweep's lines and counts (DIR/SET/SWEEP.txt, .json), and `--compare OLD NEW` reads two such runs
(before and after a change) and prints each case they judge or spend differently on, how many
cases turned worse or dearer and how many stopped being, and in how many the violation minutes and
the GPU-hours rose and fell (a rule that trades one for the other shows as both); `--set` is passed
to every sweep (a field of the replayed service, as `autoscaling_seeds.py --set` reads it). It
reports; its exit status is 1 only when a sweep could not run. `bench/autoscaling_explain.py DIR`
reads a kept run's worse and dearer cases minute by minute, and `bench/autoscaling_spread.py DIR`
judges its cases again on lines through RPS's runs at neighbouring targets (RPS's own spread).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path

from autoscaling_replay import MODES  # bench/ on sys.path
from autoscaling_seeds import FAMILIES, parser

ROOT = Path(__file__).resolve().parents[1]
SEEDS_SCRIPT = ROOT / "bench" / "autoscaling_seeds.py"
SAMPLE = ("--service", "crds/samples/rankingservice.yaml", "--max-replicas", "64")
IDLE_FLOOR_TARGET = ("--set", "autoscaling.targetSmActive=0.55")  # the idle-floor fleet's own section pairs it
START_UP_POD_START = 10  # the start-ups set's pod start (seconds); the model load makes up the rest

Sweep = tuple[str, tuple[str, ...]]
"""(name, the arguments of one `autoscaling_seeds.py` run)."""


def _sweep(name: str, *args: str) -> Sweep:
    return name, args


def _fleet_sweeps(fleets: Sequence[str], families: Sequence[str], seeds: str) -> tuple[Sweep, ...]:
    """One sweep per fleet x family, named FLEET-FAMILY; the idle-floor fleet with its own target."""
    return tuple(
        _sweep(
            f"{fleet}-{family}",
            "--fleet",
            fleet,
            "--family",
            family,
            "--seeds",
            seeds,
            *(IDLE_FLOOR_TARGET if fleet == "idle-floor" else ()),
        )
        for fleet in fleets
        for family in families
    )


SETS: dict[str, tuple[Sweep, ...]] = {
    "bench": (
        _sweep("conversation", "--family", "conversation", "--seeds", "0:20", "--azure-conversation"),
        _sweep("flash", "--seeds", "0:16", "--shared"),
        _sweep("single-server-conversation", "--fleet", "single-server", "--family", "conversation", "--seeds", "0:10"),
        _sweep("single-server-flash", "--fleet", "single-server", "--seeds", "0:8", "--shared"),
        _sweep("sample-flash", "--seeds", "0:8", "--shared", *SAMPLE),
        _sweep(
            "sample-conversation", "--family", "conversation", "--seeds", "100:120", "--azure-conversation", *SAMPLE
        ),
        _sweep("wave", "--family", "wave", "--seeds", "0:8"),
        _sweep("conversation-40", "--family", "conversation", "--seeds", "40:60"),
        _sweep("bursts", "--family", "bursts", "--seeds", "0:8"),
    ),
    "held-out": (
        _sweep("bursts-100", "--family", "bursts", "--seeds", "100:108"),
        _sweep("wave-100", "--family", "wave", "--seeds", "100:108"),
        _sweep("flash-100", "--seeds", "100:108"),
        _sweep("conversation-60", "--family", "conversation", "--seeds", "60:76"),
        _sweep("interruption", "--family", "interruption", "--seeds", "0:8"),
        _sweep("interruption-100", "--family", "interruption", "--seeds", "100:108"),
        _sweep("interruption-fast-start", "--family", "interruption", "--seeds", "0:8", "--fleet", "fast-start"),
        _sweep("interruption-slow-start", "--family", "interruption", "--seeds", "0:8", "--fleet", "slow-start"),
        _sweep("interruption-sample", "--family", "interruption", "--seeds", "0:8", *SAMPLE),
        _sweep("step", "--family", "step", "--seeds", "0:8"),
        _sweep("step-100", "--family", "step", "--seeds", "100:108"),
        _sweep("step-sample", "--family", "step", "--seeds", "0:8", *SAMPLE),
        _sweep("ramp", "--family", "ramp", "--seeds", "0:8"),
        _sweep("ramp-100", "--family", "ramp", "--seeds", "100:108"),
        _sweep("ramp-sample", "--family", "ramp", "--seeds", "0:8", *SAMPLE),
        _sweep("bursts-sample", "--family", "bursts", "--seeds", "0:8", *SAMPLE),
        _sweep("bursts-slow-start", "--family", "bursts", "--seeds", "0:8", "--fleet", "slow-start"),
        _sweep("bursts-single-server", "--family", "bursts", "--seeds", "0:8", "--fleet", "single-server"),
    ),
    "unseen-fleets": _fleet_sweeps(
        ("fast-start", "idle-floor", "steep-knee", "gentle-curve"),
        ("poisson-hour", "conversation", "wave", "bursts"),
        "400:402",
    ),
    "new-seeds": tuple(_sweep(family, "--family", family, "--seeds", "800:804") for family in sorted(FAMILIES)),
    "decline-walk": tuple(
        _sweep(f"{family}{suffix}", "--family", family, *args)
        for family in ("decline", "walk")
        for suffix, args in (
            ("", ("--seeds", "0:8")),
            ("-100", ("--seeds", "100:108")),
            ("-sample", ("--seeds", "0:8", *SAMPLE)),
            ("-single-server", ("--seeds", "0:8", "--fleet", "single-server")),
            ("-slow-start", ("--seeds", "0:8", "--fleet", "slow-start")),
        )
    ),
    "start-ups": tuple(
        _sweep(
            f"start-{serves}s-{family}",
            "--family",
            family,
            "--seeds",
            "500:502",
            "--model",
            f"pod_start_seconds={START_UP_POD_START}",
            "--model",
            f"model_load_seconds={serves - START_UP_POD_START}",
        )
        for serves in (45, 70, 180)  # seconds from the order until the pod serves
        for family in ("poisson-hour", "conversation", "bursts", "wave", "ramp", "step")
    ),
    "far-seeds": (
        *(_sweep(family, "--family", family, "--seeds", "1300:1304") for family in sorted(FAMILIES)),
        *_fleet_sweeps(
            ("single-server", "slow-start", "fast-start", "idle-floor", "steep-knee", "gentle-curve"),
            ("conversation", "wave", "step", "walk"),
            "1300:1302",
        ),
    ),
}


@dataclass(frozen=True)
class Counts:
    """A sweep's counts, as `autoscaling_seeds.py --json` writes them; added up over a set."""

    cases: int = 0
    worse: int = 0  # more violation minutes than RPS at equal GPU-hours
    dearer: int = 0  # over 1.05x RPS's GPU-hours at as few violation minutes
    violation_minutes: float = 0.0
    rps_at_equal_minutes: float = 0.0  # RPS's violation minutes at the policy's GPU-hours
    over_gpu_target: int = 0  # over 0.75 of static GPU-hours
    targets_exclude: int = 0  # of those, no reactive oracle keeps the SLO-minute target within 0.75
    every_target_met: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def describe(self) -> str:
        return (
            f"cases {self.cases:3d}  worse {self.worse:3d}  dearer {self.dearer:3d}  violation minutes "
            f"{self.violation_minutes:5g} vs {self.rps_at_equal_minutes:7.1f}  over 0.75 of static "
            f"{self.over_gpu_target:3d} ({self.targets_exclude})  every target met {self.every_target_met}"
        )


def cases_in(args: Sequence[str]) -> int:
    """How many cases a sweep's arguments make: each scale mode for each seed, the shared trace and
    the real conversation hour's two weightings (what `autoscaling_seeds.py` runs)."""
    parsed = parser().parse_args(list(args))
    a, b = (int(x) for x in parsed.seeds.split(":"))
    return len(MODES) * ((b - a) + int(parsed.shared) + 2 * int(parsed.azure_conversation))


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_seeds(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """One `autoscaling_seeds.py` process, from the checkout's root (its paths are relative to it)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, str(SEEDS_SCRIPT), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, check=False)


def run_sweep(sweep: Sweep, extra: Sequence[str], keep: Path | None, runner: Runner = run_seeds) -> Counts | str:
    """Run one sweep: its counts, or why it failed (the last lines of its error output)."""
    name, args = sweep
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "counts.json"
        done = runner([*args, *extra, "--json", str(out)])
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{name}.txt").write_text(done.stdout + done.stderr, encoding="utf-8")
        if done.returncode != 0 or not out.exists():
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            return f"exit {done.returncode}: {tail}"
        written = out.read_text(encoding="utf-8")
        if keep is not None:
            (keep / f"{name}.json").write_text(written, encoding="utf-8")
        data = json.loads(written)
        return Counts(**{f.name: data[f.name] for f in fields(Counts)})


def run_sets(
    names: Iterable[str],
    jobs: int,
    extra: Sequence[str] = (),
    out: Path | None = None,
    runner: Runner = run_seeds,
    sets: dict[str, tuple[Sweep, ...]] = SETS,
) -> dict[str, list[tuple[str, Counts | str]]]:
    """Every sweep of the named sets, `jobs` at a time: per set, (sweep, counts or why it failed) in order."""
    work = [(set_name, sweep) for set_name in names for sweep in sets[set_name]]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = pool.map(lambda item: run_sweep(item[1], extra, None if out is None else out / item[0], runner), work)
        report: dict[str, list[tuple[str, Counts | str]]] = {name: [] for name in names}
        for (set_name, (sweep_name, _)), got in zip(work, results, strict=True):
            report[set_name].append((sweep_name, got))
            print(f"  done {set_name}/{sweep_name}", file=sys.stderr, flush=True)
    return report


CaseKey = tuple[str, str, str, str]
"""(set, sweep, case, scale mode)."""
WATCHED = ("violation_minutes", "gpu_of_static", "worse", "dearer")
"""A case's figures `compare` reports a change in."""


def kept_cases(root: Path) -> dict[CaseKey, dict[str, object]]:
    """Every case a run kept with `--out ROOT` (ROOT/SET/SWEEP.json)."""
    out: dict[CaseKey, dict[str, object]] = {}
    for path in sorted(root.glob("*/*.json")):
        for case in json.loads(path.read_text(encoding="utf-8")).get("per_case", []):
            out[(path.parent.name, path.stem, str(case["case"]), str(case["mode"]))] = case
    return out


def compare(old: Path, new: Path) -> list[str]:
    """The cases two kept runs judge differently or spend differently on, and what flipped, as lines.

    A case in one run only is named as such (the sets or their seeds changed between the runs). The
    second line says which way the change traded: in how many cases the violation minutes and the
    GPU-hours rose and fell, and the minutes of every case both runs hold, before and after (a rule
    that only moves cases along the minutes-for-GPU-hours line shows as both rising somewhere)."""
    before, after = kept_cases(old), kept_cases(new)
    lines: list[str] = []
    flips = {"worse": [0, 0], "dearer": [0, 0]}  # [gained, lost]
    moved = {"minutes": [0, 0], "gpu": [0, 0]}  # [more, fewer]
    totals = [0.0, 0.0]  # violation minutes of the cases both runs hold: [old, new]
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        where = "/".join(key[:2]) + f" {key[2]} {key[3]}"
        if a is None or b is None:
            lines.append(f"  {where}: only in {'the new' if a is None else 'the old'} run")
            continue
        totals[0] += float(str(a["violation_minutes"]))
        totals[1] += float(str(b["violation_minutes"]))
        for what, field in (("minutes", "violation_minutes"), ("gpu", "gpu_of_static")):
            was, now = float(str(a[field])), float(str(b[field]))
            moved[what][0] += now > was
            moved[what][1] += now < was
        if all(a[k] == b[k] for k in WATCHED):
            continue
        for flag, counts in flips.items():
            counts[0] += bool(b[flag]) and not a[flag]
            counts[1] += bool(a[flag]) and not b[flag]
        marks = [f"{flag} {'gained' if b[flag] else 'lost'}" for flag in ("worse", "dearer") if a[flag] != b[flag]]
        lines.append(
            f"  {where}: violation minutes {a['violation_minutes']} -> {b['violation_minutes']}, GPU-h "
            f"{a['gpu_of_static']} -> {b['gpu_of_static']} of static" + (f" ({', '.join(marks)})" if marks else "")
        )
    summary = ", ".join(f"{flag} {g} gained / {lost} lost" for flag, (g, lost) in flips.items())
    traded = (
        f"violation minutes more in {moved['minutes'][0]} / fewer in {moved['minutes'][1]} cases "
        f"({totals[0]:g} -> {totals[1]:g} over the cases both runs hold), "
        f"GPU-hours more in {moved['gpu'][0]} / fewer in {moved['gpu'][1]}"
    )
    return [f"{len(lines)} cases differ; {summary}", traded, *lines]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="*", metavar="SET", help=f"of {', '.join(SETS)} (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="sweeps run at once (one per CPU)")
    ap.add_argument("--out", type=Path, help="keep each sweep's lines and counts in OUT/SET/SWEEP.txt, .json")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to every sweep")
    ap.add_argument(
        "--compare", nargs=2, type=Path, metavar=("OLD", "NEW"), help="compare two --out runs case by case; runs none"
    )
    args = ap.parse_args(argv)
    if args.compare:
        missing = [str(p) for p in args.compare if not any(p.glob("*/*.json"))]
        if missing:
            ap.error(f"--compare: {', '.join(missing)} holds no kept sweep (DIR/SET/SWEEP.json from --out DIR)")
        print("\n".join(compare(*args.compare)))
        return 0
    unknown = [name for name in args.sets if name not in SETS]
    if unknown:
        ap.error(f"SET: no set named {', '.join(unknown)}; the sets are {', '.join(SETS)}")
    if args.jobs < 1:
        ap.error(f"--jobs: {args.jobs}; run at least one sweep at a time")
    names = args.sets or list(SETS)
    extra = [a for text in args.set for a in ("--set", text)]
    report = run_sets(names, args.jobs, extra, args.out)
    failed = 0
    for set_name, rows in report.items():
        total = Counts()
        print(f"{set_name}:")
        for sweep_name, got in rows:
            if isinstance(got, str):
                failed += 1
                print(f"  {sweep_name:32s} FAILED ({got})")
                continue
            total += got
            print(f"  {sweep_name:32s} {got.describe()}")
        print(f"  {'in all':32s} {total.describe()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
