"""One GPU check: training MFU, serving latency per precision plan, and a measured device profile, as one table.

Run:  bash bench/gpu_check.sh [--precision fp32,bf16] [--preset base]      (one CUDA GPU, under 10 minutes)
      python bench/gpu_check.py --dry-run                                  (CPU, tiny preset: the script's logic only)

1. **Training MFU** as end-to-end MFU = local MFU x scaling ratio:
   *local MFU* is ``bench/train_gpu_mfu.py --mode plain`` (the model alone on the GPU: FLOPs per
   step / step time / the device's dense bf16 peak); the *scaling ratio* is the throughput per
   GPU of the real training loop (``--mode trainer``: TorchRec DMP + FSDP2, one rank) over the
   plain model's at the same batch. On one GPU the ratio is the cost of the distributed stack on
   a rank; on N GPUs the same two runs give per-GPU throughput at N over 1.
2. **Serving p50/p99** of one request at 64 / 256 / 1,024 candidates, the user state read by
   index (sharing), for each precision plan of ``--precision`` (``fp32``; ``bf16`` runs the model
   under bf16 autocast; further plans register in :data:`PRECISIONS`).
3. **The emulated device profile** (``gem_workloads/serving/device.py``'s format) from timing
   one- and two-request batches on a grid of sequence lengths x candidates, written to
   ``--profile-out`` for ``--device emulated:NAME --device-profile FILE``.

Without CUDA (and without ``--dry-run``) it exits 2 before measuring anything: no figure is made up.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = (64, 256, 1024)


def _autocast(dtype_name: str) -> Callable[[str], AbstractContextManager[Any]]:
    def enter(device_type: str) -> AbstractContextManager[Any]:
        import torch

        return torch.autocast(device_type, dtype=getattr(torch, dtype_name))

    return enter


# A precision plan: what the scoring call runs under, given the device type.
PRECISIONS: dict[str, Callable[[str], AbstractContextManager[Any]]] = {
    "fp32": lambda device_type: nullcontext(),
    "bf16": _autocast("bfloat16"),
}


@contextmanager
def _step(name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    print(f"[gpu-check] {name} ...", file=sys.stderr, flush=True)
    yield
    print(f"[gpu-check] {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def _last_json(out: str) -> dict[str, Any]:
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    raise ValueError("no JSON line in the output")


def training(preset: str, batch: int, steps: int, device: str, timeout_s: float) -> dict[str, Any]:
    """Local MFU (plain), trainer throughput, their ratio and the end-to-end MFU."""
    base = [sys.executable, str(ROOT / "bench" / "train_gpu_mfu.py"), "--preset", preset, "--device", device]
    base += ["--batch-size", str(batch), "--steps", str(steps), "--warmup", "2"]
    out: dict[str, Any] = {}
    for mode in ("plain", "trainer"):
        try:
            proc = subprocess.run(
                [*base, "--mode", mode], capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, check=False
            )
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output")
            out[mode] = _last_json(proc.stdout)
        except (subprocess.TimeoutExpired, RuntimeError, ValueError) as exc:
            out[mode] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    plain, trainer = out["plain"], out["trainer"]
    local = plain.get("mfu")
    ratio = None
    if plain.get("examples_per_s") and trainer.get("examples_per_s"):
        ratio = trainer["examples_per_s"] / plain["examples_per_s"]
    out["local_mfu"] = local
    out["scaling_ratio"] = None if ratio is None else round(ratio, 4)
    out["e2e_mfu"] = None if local is None or ratio is None else round(local * ratio, 5)
    return out


class _Timer:
    """Times engine calls on ``device`` (synchronising around each on CUDA)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch, self.device = torch, device

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def times(self, call: Callable[[], Any], n: int, warmup: int) -> list[float]:
        out = []
        for i in range(n + warmup):
            self.sync()
            t0 = time.perf_counter()
            call()
            self.sync()
            if i >= warmup:
                out.append(time.perf_counter() - t0)
        return out


def serving(preset: str, precisions: list[str], requests: int, device: Any) -> list[dict[str, Any]]:
    """p50/p99 of one request per candidate count and precision plan (state read by index)."""
    from gem_workloads.scoring.engine import Engine, preset_model
    from gem_workloads.scoring.request import example_request, parse_request

    loaded = preset_model(preset)
    loaded.model.to(device)
    engine, timer, seq = Engine(loaded, device), _Timer(device), loaded.config.seq_len
    rows = []
    for name in precisions:
        for n in CANDIDATES:
            req = parse_request(example_request(loaded.schema, n, seq, seed=n), loaded.schema, seq, n)

            def call(r: Any = req) -> None:
                engine.score([r], True)

            with PRECISIONS[name](device.type):
                ms = np.asarray(timer.times(call, requests, 3), dtype=np.float64) * 1000
            row = {"precision": name, "candidates": n, "seq_len": seq, "requests": requests}
            row.update(p50_ms=round(float(np.percentile(ms, 50)), 3), p99_ms=round(float(np.percentile(ms, 99)), 3))
            rows.append(row)
    return rows


def device_profile(
    preset: str, seq_lens: list[int], cands: list[int], precision: str, device: Any, out: Path
) -> dict[str, Any]:
    """Median seconds of one-request batches on the grid, plus the cost of a second request."""
    from gem_workloads.scoring.engine import Engine, preset_model
    from gem_workloads.scoring.request import example_request, parse_request
    from gem_workloads.serving.device import DeviceProfile

    timer = _Timer(device)
    table, extra = [], []
    for seq in seq_lens:
        loaded = preset_model(preset, seq_len=seq)
        loaded.model.to(device)
        engine = Engine(loaded, device)

        def median(reqs: list[Any], engine: Any = engine) -> float:
            with PRECISIONS[precision](device.type):
                return float(np.median(timer.times(lambda: engine.score(reqs, True), 10, 2)))

        def body(n: int, seed: int, loaded: Any = loaded, seq: int = seq) -> Any:
            return parse_request(example_request(loaded.schema, n, seq, seed=seed), loaded.schema, seq, n)

        row = [median([body(n, 0)]) for n in cands]
        table.append(row)
        extra.append(max(0.0, median([body(cands[0], 0), body(cands[0], 1)]) - row[0]))
    name = "cpu" if device.type != "cuda" else _device_name(device)
    raw = {
        "device": name,
        "description": f"measured by bench/gpu_check.py: preset {preset}, {precision}, median of 10",
        "seq_len": seq_lens,
        "candidates": cands,
        "seconds": table,
        "per_extra_request_seconds": extra,
    }
    DeviceProfile.from_mapping(raw, where=str(out))  # the checks the server applies when it loads it
    out.write_text(json.dumps(raw, indent=1) + "\n")
    return {"file": str(out), **raw}


def _device_name(device: Any) -> str:
    import torch

    return str(torch.cuda.get_device_name(device)).lower().replace(" ", "-")


def _fmt(v: Any, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def table(result: dict[str, Any]) -> str:
    """The one table the check prints."""
    t = result["training"]
    how = "DRY RUN on the CPU: figures mean nothing" if result["dry_run"] else "measured"
    lines = [f"GPU check on {result['device']} ({how})"]
    lines.append(f"{'measure':44s} {'value':>14s}")
    lines.append(f"{'training local MFU (plain, ' + result['preset'] + ')':44s} {_fmt(t['local_mfu'], '14.4f')}")
    lines.append(f"{'training scaling ratio (trainer / plain)':44s} {_fmt(t['scaling_ratio'], '14.4f')}")
    lines.append(f"{'training E2E MFU = local x scaling':44s} {_fmt(t['e2e_mfu'], '14.5f')}")
    for mode in ("plain", "trainer"):
        if "error" in t[mode]:
            lines.append(f"  {mode} run failed: {t[mode]['error']}")
    for row in result["serving"]:
        label = f"serving {row['precision']} {row['candidates']} candidates p50 / p99 ms"
        lines.append(f"{label:44s} {row['p50_ms']:>6.2f} / {row['p99_ms']:<6.2f}")
    prof = result["profile"]
    lines.append(f"{'emulated device profile written':44s} {prof['file']}")
    for seq, row in zip(prof["seq_len"], prof["seconds"], strict=True):
        cells = " ".join(f"{n}:{s * 1000:.2f}ms" for n, s in zip(prof["candidates"], row, strict=True))
        lines.append(f"  seq_len {seq:5d}: {cells}")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default="fp32", help=f"comma-separated plans among {sorted(PRECISIONS)}")
    ap.add_argument("--preset", default="base")
    ap.add_argument("--batch-size", type=int, default=512, help="training batch")
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--requests", type=int, default=200, help="timed requests per serving point")
    ap.add_argument("--profile-seq-lens", default="256,1024,4096")
    ap.add_argument("--profile-candidates", default="64,256,1024,4096")
    ap.add_argument("--profile-out", default=str(ROOT / "bench" / "device_profile_measured.json"))
    ap.add_argument("--json", help="also write every figure as JSON here")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny preset, a few steps: checks the script only")
    args = ap.parse_args(argv)
    names = [p.strip() for p in args.precision.split(",") if p.strip()]
    unknown = [p for p in names if p not in PRECISIONS]
    if unknown or not names:
        ap.error(f"--precision: unknown plan(s) {unknown}; known: {sorted(PRECISIONS)}")
    args.precisions = names
    if args.dry_run:
        args.preset, args.batch_size, args.train_steps, args.requests = "tiny", 32, 2, 3
        args.profile_seq_lens, args.profile_candidates = "16", "8,32"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible; this check needs one GPU (--dry-run checks the script)")
        return 2
    device = torch.device("cuda", 0) if not args.dry_run else torch.device("cpu")
    result: dict[str, Any] = {"preset": args.preset, "dry_run": args.dry_run, "precisions": args.precisions}
    result["device"] = _device_name(device) if device.type == "cuda" else "cpu"
    with _step("training MFU"):
        result["training"] = training(args.preset, args.batch_size, args.train_steps, device.type, 240)
    with _step("serving p50/p99"):
        result["serving"] = serving(args.preset, args.precisions, args.requests, device)
    with _step("device profile"):
        lens = [int(x) for x in args.profile_seq_lens.split(",")]
        cands = [int(x) for x in args.profile_candidates.split(",")]
        out = Path(args.profile_out)
        result["profile"] = device_profile(args.preset, lens, cands, args.precisions[-1], device, out)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
