"""``python -m gem_workloads.serving.origin DIR [--preset tiny]``: a model origin for local load tests.

Writes a randomly initialised preset as a model directory (``gem-model.json`` + weights, what the
server's ``--model`` reads) plus the loader's ``manifest.json``, so that pods pull it with the real
``gem-load pull DIR DEST`` (or through nginx in front of DIR) exactly as from object storage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gem_common.argtypes import positive_int

from ..loader.manifest import MANIFEST_NAME, build_manifest
from ..models.model_dir import save_model_dir
from ..scoring.engine import preset_model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gem_workloads.serving.origin", description=__doc__.split("\n")[0])
    p.add_argument("dir", help="origin directory to write (created)")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--part-size", type=positive_int, default=8 * 1024 * 1024, help="manifest part size in bytes")
    args = p.parse_args(argv)
    try:
        loaded = preset_model(args.preset, seed=args.seed)
    except ValueError as exc:
        print(f"error: --preset: {exc}", file=sys.stderr)
        return 2
    out = Path(args.dir)
    save_model_dir(out, loaded.model, loaded.kind, loaded.config, loaded.schema, loaded.version)
    (out / MANIFEST_NAME).write_text(build_manifest(out, args.part_size).to_json())
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
