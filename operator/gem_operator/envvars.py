"""The operator's numeric environment variables, read once when the handlers load, and checked.

They come from the chart (whose values schema bounds them) but also from `kubectl set env`, a
hand-edited manifest or a shell, where nothing does. Read with a bare `float()`, `abc` stopped
`gemop run` with a traceback, while `0` or `nan` for the resync period went through to kopf's
timers. A bad value raises `EnvSettingError`, which `gemop run` reports as one line naming the
variable and what it takes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from urllib.parse import urlsplit


class EnvSettingError(ValueError):
    """An environment variable of the operator holds a value it cannot run with."""


def env_number(
    name: str,
    default: float,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    whole: bool = False,
    env: Mapping[str, str] | None = None,
) -> float:
    """`name` from the environment (unset or blank: `default`), checked against its bounds."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    bounds = [f"> {above:g}" if above is not None else "", f">= {at_least:g}" if at_least is not None else ""]
    bounds.append(f"<= {at_most:g}" if at_most is not None else "")
    expected = f"a {'whole number' if whole else 'finite number'} {' and '.join(b for b in bounds if b)}".strip()
    try:
        value = float(int(raw)) if whole else float(raw)
    except ValueError:
        raise EnvSettingError(f"{name}={raw!r}: expected {expected}") from None
    in_bounds = (
        math.isfinite(value)
        and (above is None or value > above)
        and (at_least is None or value >= at_least)
        and (at_most is None or value <= at_most)
    )
    if not in_bounds:
        raise EnvSettingError(f"{name}={raw!r}: expected {expected}")
    return value


def env_switch(
    name: str, default: bool, *, on: tuple[str, ...], off: tuple[str, ...], env: Mapping[str, str] | None = None
) -> bool:
    """`name` as on/off (unset or blank: `default`), matched without case; anything else is an error,
    not a silent "on": a typo such as `disabled` would have mounted the hostPath it meant to keep out."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    if raw.lower() in (v.lower() for v in on):
        return True
    if raw.lower() in (v.lower() for v in off):
        return False
    raise EnvSettingError(f"{name}={raw!r}: expected one of {', '.join(on + off)}")


def env_urls(name: str, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Comma-separated http(s) URLs with a host (unset or blank: none).

    Checked here because they reach every workload pod (the loader's `--peers`), where one bad
    entry fails each pod's init container; the operator stopping at start names the variable once.
    """
    raw = (os.environ if env is None else env).get(name, "")
    urls = tuple(u.strip() for u in raw.split(",") if u.strip())
    for url in urls:
        problem = http_url_problem(url)
        if problem is not None:
            raise EnvSettingError(f"{name}: {url!r}: {problem}, comma-separated")
    return urls


def http_url_problem(url: str) -> str | None:
    """Why `url` is not an http(s)://host[:port] URL, or None when it is (a port of 0 or past
    65535 included: urllib only says so when the port is read)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a valid URL ({exc}); expected http(s)://host[:port]"
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        return "expected http(s)://host[:port]"
    return None


__all__ = ["EnvSettingError", "env_number", "env_switch", "env_urls", "http_url_problem"]
