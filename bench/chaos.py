"""The operator under faults, on the embedded cluster: kill points, API faults, HA takeover,
malformed input. Prints each figure beside its target (issue targets; no baseline applies to an
invariant count, and the fault runs' baseline is the same run at 0 % faults).

    python bench/chaos.py [--kill-points 200] [--rates 0,0.03,0.10] [--ha-rounds 6] [--pods 24]

The operator runs as `gemop run` processes; the cluster, the fault proxy and the simulated kubelet
are the test doubles (gem_testbed). Each section can be skipped with its count set to 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from gem_testbed.faults import chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kill-points", type=int, default=200)
    parser.add_argument("--rates", default="0,0.03,0.10", help="fault rates (each of 500, 429, 409)")
    parser.add_argument("--pods", type=int, default=24, help="pods of the GEMTraining in the fault runs")
    parser.add_argument("--ha-rounds", type=int, default=6)
    parser.add_argument("--malformed", type=int, default=1, help="1 runs the malformed-resource corpus")
    args = parser.parse_args(argv)
    failed = False
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.malformed:
            m = chaos.malformed(tmp)
            print(
                f"malformed corpus: {m.cases} cases; refused at the API with the field: {m.refused_at_door}; "
                f"admitted, then Ready=False/InvalidSpec naming the field with an Event: {m.invalid_spec}; "
                f"problems: {len(m.problems)} (target 0)"
            )
            for p in m.problems:
                print(f"  {p}")
            failed |= bool(m.problems)
        for rate in (float(r) for r in args.rates.split(",") if r):
            f = chaos.faults(rate, tmp, pods=args.pods, timeout=300 if rate < 0.05 else 600)
            target_train, target_pools = (120, 60) if rate <= 0.03 else (300, 300)

            def fmt(v: float | None) -> str:
                return "did not converge" if v is None else f"{v:.1f} s"

            print(
                f"faults {rate:.0%} each of 500/429/409 (+{rate:.0%} delayed, watches cut ~5 s): "
                f"{args.pods}-pod GEMTraining Running {fmt(f.training_seconds)} (target <= {target_train} s), "
                f"pools Ready {fmt(f.pools_seconds)} (target <= {target_pools} s), spec change converged "
                f"{fmt(f.change_seconds)}; liveness p99 {f.liveness_p99 * 1000:.0f} ms, max "
                f"{f.liveness_max * 1000:.0f} ms (target p99 < 1000 ms); violations {len(f.violations)}; "
                f"proxy {f.counts}"
            )
            failed |= bool(f.violations) or f.training_seconds is None or f.liveness_p99 >= 1.0
        if args.ha_rounds:
            h = chaos.ha(args.ha_rounds, tmp)
            print(
                f"HA (two replicas, default flags, default 15 s peering lifetime): takeover after SIGTERM "
                f"{chaos.summary(h.sigterm_seconds)} (target <= 5 s); after kill -9 "
                f"{chaos.summary(h.sigkill_seconds)} (target <= 20 s); rounds with both acting {h.both_active}, "
                f"with none taking over {h.none_active_after}"
            )
            failed |= bool(h.none_active_after or h.both_active)
        if args.kill_points:
            k = chaos.kill_points(args.kill_points, tmp, check_every=10)
            print(
                f"kill points: {k.points} kill -9 during {k.actions}; {k.checks} convergence checks, "
                f"{k.unconverged} not converged within 90 s; invariant violations {len(k.violations)} (target 0)"
            )
            for v in k.violations[:20]:
                print(f"  {v}")
            failed |= bool(k.violations or k.unconverged)
    print(f"total {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
