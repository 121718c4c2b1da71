#!/usr/bin/env bash
# One GPU check (see bench/gpu_check.py): training MFU as local MFU x scaling ratio, serving p50/p99
# at 64 / 256 / 1,024 candidates per precision plan, and a measured emulated-device profile, printed
# as one table. Needs one CUDA GPU and finishes within 10 minutes; without CUDA it stops at once.
#
#   bash bench/gpu_check.sh [--precision fp32,bf16] [--preset base] [--json out.json]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA device is visible to torch; this check needs one GPU" >&2
    echo "           (python bench/gpu_check.py --dry-run runs its logic on the CPU)" >&2
    exit 2
fi
exec timeout 600 "$PYTHON" bench/gpu_check.py "$@"
