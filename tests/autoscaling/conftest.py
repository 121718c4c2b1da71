"""What the autoscaling tests share: loading a bench script as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """A module of `bench/`, loaded from its file (the benches are scripts, not a package). bench/
    goes on sys.path first, as when a bench runs as a script: they import each other by name."""
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))
    loaded = importlib.util.spec_from_file_location(f"{name}_for_tests", BENCH_DIR / f"{name}.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules[loaded.name] = module
    loaded.loader.exec_module(module)
    return module
