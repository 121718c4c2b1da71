"""A training loop's data side, for the kill -9 test: batches, ids logged per step, positions checkpointed.

    python _stream_worker.py SPEC SHARD SHARDS STEPS EVERY CKPT IDS [HOLD]

Resumes from CKPT (JSON {"step", "state"}, replaced atomically every EVERY steps) when it exists.
HOLD: after logging that step, wait to be killed (so a kill lands mid-run however fast the steps).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from gem_workloads.data.spec import load_data_spec
from gem_workloads.data.stream_loader import StreamLoader


def main() -> None:
    spec_path, shard, shards, steps, every, ckpt, ids = sys.argv[1:8]
    hold = int(sys.argv[8]) if len(sys.argv) > 8 else None
    loader = StreamLoader(load_data_spec(spec_path), 48, 8, 1000, shard=int(shard), shards=int(shards))
    start = 0
    if Path(ckpt).exists():
        saved = json.loads(Path(ckpt).read_text())
        start = int(saved["step"])
        loader.restore(saved["state"], start)
    with open(ids, "a") as log:
        for step in range(start + 1, int(steps) + 1):
            batch = loader.batch(step)
            log.write(json.dumps({"step": step, "ids": batch.extras["example_id"].tolist()}) + "\n")
            log.flush()
            if step % int(every) == 0:
                tmp = Path(ckpt + ".tmp")
                tmp.write_text(json.dumps({"step": step, "state": loader.state()}))
                os.replace(tmp, ckpt)
            while step == hold:
                time.sleep(1)
    loader.close()


if __name__ == "__main__":
    main()
