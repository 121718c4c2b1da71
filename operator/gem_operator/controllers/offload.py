"""CPU-heavy steps (placement planning, rendering a large gang) off the event loop, within a budget.

kopf serves every resource, its watches, peering keep-alives and the liveness endpoint from one
event loop; a 9-second plan on that loop stalls all of them. Here such steps run on a small thread
pool (two threads: a second large job does not queue behind the first, and the loop keeps the
GIL often enough to answer within milliseconds). A step past its budget fails the pass with a
message; its thread finishes in the background and is not started again until the next pass.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from gem_operator.envvars import env_number

P = ParamSpec("P")
T = TypeVar("T")

CPU_BUDGET_SECONDS = env_number("GEM_CPU_BUDGET_SECONDS", 60.0, above=0)
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gem-cpu")


class BudgetExceeded(Exception):
    """A CPU-heavy step took longer than its budget."""


async def offload(what: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on the CPU pool; BudgetExceeded after CPU_BUDGET_SECONDS."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.run_in_executor(_POOL, functools.partial(fn, *args, **kwargs))
    try:
        result: T = await asyncio.wait_for(asyncio.shield(future), CPU_BUDGET_SECONDS)
    except TimeoutError:
        raise BudgetExceeded(
            f"{what} took longer than {CPU_BUDGET_SECONDS:.0f} s; the job may be too large for this cluster "
            "(fewer GPUs or a simpler topology helps)"
        ) from None
    return result
