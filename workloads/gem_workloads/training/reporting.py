"""How a training process ends: what it tells the operator, and how it exits."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from .export import ExportedVersion, termination_message


def report_checkpoint(
    latest: str | Path | None, path: str | None = None, *, exported: Sequence[ExportedVersion] = ()
) -> bool:
    """Tell the operator the newest checkpoint and the exported versions through the termination message.

    docs/contracts.md: JSON {"checkpoint": "step-000400", "models": [...]} in /dev/termination-log
    (or $GEM_TERMINATION_LOG); the newest versions that fit in Kubernetes' 4 KiB. Best effort:
    outside a pod the file is absent and nothing is written.
    """
    target = Path(path or os.environ.get("GEM_TERMINATION_LOG", "/dev/termination-log"))
    if (latest is None and not exported) or not target.parent.is_dir():
        return False
    try:
        target.write_text(termination_message(None if latest is None else Path(latest).name, list(exported)))
    except OSError:
        return False
    return True


def exit_without_teardown(code: int) -> NoReturn:
    """End a process that trained: flush what it printed, then exit without interpreter finalization.

    Why: torch's C++ threads (gloo's workers) can still be dropping their last references to
    tensors while the interpreter finalizes. Python <= 3.13 ends a thread that asks for the GIL
    then with pthread_exit, whose unwinding through a C++ destructor aborts the process
    ("terminate called without an active exception", SIGABRT): a run that finished and saved its
    checkpoint would be reported failed and restarted. Everything durable is done by this point
    (checkpoints complete in their store, the termination message written, the process group
    destroyed), so nothing is lost by skipping finalization.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing left to save
            stream.flush()
    logging.shutdown()
    os._exit(code)
