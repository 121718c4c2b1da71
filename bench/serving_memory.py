"""Memory of one ranking request: candidates reading the user state by index vs copying it per candidate.

Run:  python bench/serving_memory.py [--preset base] [--skip-rss]
(``bench/serving_sharing.py`` runs it as its third part.)

1. Bytes allocated per request (the model's tensors, counted op by op by a dispatch mode: every
   new storage an op returns, and the peak of those alive at once) at 64 / 256 / 1,024 candidates.
2. From outside: the peak RSS (``VmHWM`` in ``/proc/PID/status``) of a real server process
   (``python -m gem_workloads.serving --preset base``) after one request of 1 candidate, then after
   one of 1,024; once reading the state by index, once with ``--copy-user-state``.
   Target: the shared server grows by at most 84 MB (a quarter of the 337 MB the copying server
   grew by when it was the only path).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
import weakref
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MB = 1e6
TARGET_GROWTH_MB = 337 / 4


def _meter_class() -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class AllocationMeter(TorchDispatchMode):
        """Bytes of the storages ops return while active: ``total`` allocated and ``peak`` alive at once."""

        def __init__(self) -> None:
            super().__init__()
            self.total = self.live = self.peak = 0
            self.refs: dict[int, list[int]] = {}  # storage -> [tensors alive, bytes]

        def _release(self, key: int) -> None:
            ref = self.refs[key]
            ref[0] -= 1
            if ref[0] == 0:
                self.live -= ref[1]
                del self.refs[key]

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            known = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            for t in tree_leaves(out):
                if not isinstance(t, torch.Tensor):
                    continue
                key = t.untyped_storage()._cdata
                if key not in self.refs:
                    if key in known:  # a view or in-place result of a tensor made outside the meter
                        continue
                    nbytes = t.untyped_storage().nbytes()
                    self.refs[key] = [0, nbytes]
                    self.total += nbytes
                    self.live += nbytes
                    self.peak = max(self.peak, self.live)
                self.refs[key][0] += 1
                weakref.finalize(t, self._release, key)
            return out

    return AllocationMeter


def request_bytes(preset: str, cands: list[int]) -> list[dict[str, Any]]:
    """Allocated and peak bytes of one request per candidate count, shared vs copied."""
    import torch

    from gem_workloads.scoring.engine import Engine, preset_model
    from gem_workloads.scoring.request import example_request, parse_request

    meter_cls = _meter_class()
    loaded = preset_model(preset)
    seq = loaded.config.seq_len
    engines = {"shared": Engine(loaded), "copied": Engine(loaded, copy_user_state=True)}
    rows = []
    for n in cands:
        req = parse_request(example_request(loaded.schema, n, seq, seed=n), loaded.schema, seq, n)
        row: dict[str, Any] = {"candidates": n, "preset": preset}
        for name, engine in engines.items():
            engine.probabilities([req], True)  # warm-up (packs grouped weights once)
            with torch.inference_mode(), meter_cls() as meter:
                probs = engine.probabilities([req], True)
            del probs
            row[name] = {"allocated_mb": round(meter.total / MB, 2), "peak_mb": round(meter.peak / MB, 2)}
        rows.append(row)
        s, c = row["shared"], row["copied"]
        print(
            f"  {n:5d} candidates: allocated {s['allocated_mb']:9.1f} MB (peak {s['peak_mb']:8.1f} MB) shared | "
            f"{c['allocated_mb']:9.1f} MB (peak {c['peak_mb']:8.1f} MB) copied per candidate",
            flush=True,
        )
    return rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / MB
    raise RuntimeError("no VmHWM in /proc/PID/status")


def _call(url: str, body: bytes | None = None, timeout: float = 600) -> bytes:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out: bytes = r.read()
        return out


def server_rss(preset: str, copy_user_state: bool, big: int = 1024) -> dict[str, Any]:
    """Peak RSS of a real server after a 1-candidate request, then after a ``big``-candidate one."""
    port = _free_port()
    cmd = [sys.executable, "-m", "gem_workloads.serving", "--preset", preset, "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--threads", "1", "--max-candidates", str(big), "--device", "cpu"]
    cmd += ["--copy-user-state"] if copy_user_state else []
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                _call(f"{url}/readyz", timeout=5)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the ranking server did not become ready") from None
                time.sleep(0.5)
        peaks = {"ready_mb": _vm_hwm_mb(proc.pid)}
        for n in (1, big):
            body = _call(f"{url}/v1/example-request?candidates={n}&seed=1")
            t0 = time.perf_counter()
            answer = json.loads(_call(f"{url}/v1/rank", body))
            assert len(answer["scores"]) == n
            peaks[f"after_{n}_mb"] = _vm_hwm_mb(proc.pid)
            peaks[f"seconds_{n}"] = round(time.perf_counter() - t0, 2)
    finally:
        proc.terminate()
        proc.wait(30)
    growth = peaks[f"after_{big}_mb"] - peaks["after_1_mb"]
    return {**{k: round(v, 1) for k, v in peaks.items()}, "growth_mb": round(growth, 1)}


def run(preset: str, cands: list[int], rss: bool) -> dict[str, Any]:
    print(f"bytes per request ({preset} preset, one request, its user's whole sequence)")
    result: dict[str, Any] = {"bytes": request_bytes(preset, cands)}
    if rss:
        print(f"peak RSS of a real {preset} server process, one request of 1 then of {max(cands)} candidates")
        result["rss"] = {}
        for name, copy in (("shared", False), ("copied", True)):
            r = server_rss(preset, copy, max(cands))
            result["rss"][name] = r
            print(
                f"  {name:7s}: ready {r['ready_mb']:8.1f} MB, after 1 {r['after_1_mb']:8.1f} MB, after "
                f"{max(cands)} {r[f'after_{max(cands)}_mb']:8.1f} MB: growth {r['growth_mb']:7.1f} MB",
                flush=True,
            )
        grown = result["rss"]["shared"]["growth_mb"]
        verdict = "met" if grown <= TARGET_GROWTH_MB else "MISSED"
        print(f"shared server growth {grown:.1f} MB (target <= {TARGET_GROWTH_MB:.0f} MB): {verdict}")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="base")
    ap.add_argument("--skip-rss", action="store_true", help="only the in-process byte counts")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    result = run(args.preset, [64, 256, 1024], not args.skip_rss)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
