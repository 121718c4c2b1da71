"""Logging for `gemop run`: one stream to stderr, as text or JSON lines, at a chosen level.

kopf's own formatters are used so that messages about a resource carry its reference (namespace
and name) in both formats; kopf.run alone configures no handler, which left handler failures only
in Events (which fail too when the API does).
"""

from __future__ import annotations

import logging

import kopf

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Root logger to stderr: text lines with time, logger, level and the object; or JSON lines."""
    if level.upper() not in LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(LEVELS)}, not {level!r}")
    if fmt not in FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    log_format = kopf.LogFormat.JSON if fmt == "json" else kopf.LogFormat.FULL
    kopf.configure(debug=level.upper() == "DEBUG", log_format=log_format, log_prefix=fmt == "text")
    logging.getLogger().setLevel(level.upper())
    # One line per HTTP request (lightkube's httpx) is debugging detail, not an operator's log.
    for name in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(name).setLevel(logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING)
