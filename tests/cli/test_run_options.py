"""`gemop run` options: distinct peering priorities, log level and format."""

from __future__ import annotations

import json
import logging

import pytest

from gem_operator.cli import build_parser
from gem_operator.cli.logs import configure_logging
from gem_operator.cli.operator import PRIORITY_MAX, OperatorOptions, default_priority


def test_priorities_are_distinct_per_replica_and_stable_per_pod() -> None:
    assert default_priority("uid-a") == default_priority("uid-a") != default_priority("uid-b")
    randoms = {default_priority("") for _ in range(50)}
    assert len(randoms) == 50 and all(1 <= p <= PRIORITY_MAX for p in randoms)
    assert OperatorOptions(priority=7).resolved_priority() == 7
    assert OperatorOptions().resolved_priority() != OperatorOptions().resolved_priority()


def test_run_flags_parse() -> None:
    args = build_parser().parse_args(
        ["run", "-n", "x", "--priority", "5", "--log-level", "debug", "--log-format", "json"]
    )
    assert (args.priority, args.log_level, args.log_format) == (5, "DEBUG", "json")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--log-format", "xml"])


def test_json_and_text_lines_carry_time_level_and_message(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging("INFO", "json")
        logging.getLogger("gem_operator.test").error("GEMTraining default/x: reconcile failed: boom")
        logging.getLogger("gem_operator.test").debug("hidden")
        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
        assert line["message"].endswith("boom") and line["severity"] == "error" and line["timestamp"]
        configure_logging("WARNING", "text")
        logging.getLogger("gem_operator.test").info("hidden")
        logging.getLogger("gem_operator.test").warning("shown")
        err = capsys.readouterr().err
        assert "hidden" not in err and "[WARNING ] shown" in err
        with pytest.raises(ValueError, match="--log-level"):
            configure_logging("LOUD", "text")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
