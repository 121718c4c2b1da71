"""`gemop run` options: distinct peering priorities, log level and format, the environment it reads."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gem_operator.cli import build_parser
from gem_operator.cli.logs import configure_logging
from gem_operator.cli.operator import PRIORITY_MAX, OperatorOptions, default_priority
from gem_operator.envvars import EnvSettingError, env_number, env_switch, env_urls


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


@pytest.mark.parametrize(
    ("env", "kwargs", "value_or_error"),
    [
        ({}, {"above": 0}, 10.0),
        ({"X": " "}, {"above": 0}, 10.0),
        ({"X": "2.5"}, {"above": 0, "at_most": 3600}, 2.5),
        ({"X": "3600"}, {"above": 0, "at_most": 3600}, 3600.0),
        ({"X": "0"}, {"above": 0, "at_most": 3600}, "X='0': expected a finite number > 0 and <= 3600"),
        ({"X": "nan"}, {"above": 0}, "X='nan': expected a finite number > 0"),
        ({"X": "inf"}, {"above": 0}, "X='inf': expected a finite number > 0"),
        ({"X": "abc"}, {"above": 0}, "X='abc': expected a finite number > 0"),
        ({"X": "6"}, {"at_least": 1, "whole": True}, 6.0),
        ({"X": "1.5"}, {"at_least": 1, "whole": True}, "X='1.5': expected a whole number >= 1"),
        ({"X": "70000"}, {"at_least": 0, "at_most": 65535, "whole": True}, "expected a whole number >= 0 and <= 65535"),
    ],
)
def test_env_number_bounds(env: dict[str, str], kwargs: dict[str, Any], value_or_error: float | str) -> None:
    if isinstance(value_or_error, float):
        assert env_number("X", 10.0, env=env, **kwargs) == value_or_error
    else:
        with pytest.raises(EnvSettingError) as info:
            env_number("X", 10.0, env=env, **kwargs)
        assert value_or_error in str(info.value)


def test_env_switch_and_urls() -> None:
    """GEM_NODE_CACHE=disabled used to mean "on" (anything but off/false/0/none), and GEM_MODEL_PEERS
    reached every workload pod's loader unchecked, where a bad entry failed each init container."""
    switch = {"on": ("hostPath", "on"), "off": ("off", "none")}
    assert env_switch("X", True, env={}, **switch) is True
    assert env_switch("X", True, env={"X": " OFF "}, **switch) is False
    assert env_switch("X", False, env={"X": "hostpath"}, **switch) is True
    with pytest.raises(EnvSettingError, match="X='disabled': expected one of hostPath, on, off, none"):
        env_switch("X", True, env={"X": "disabled"}, **switch)
    assert env_urls("X", env={}) == ()
    assert env_urls("X", env={"X": " http://a:8470, https://b ,"}) == ("http://a:8470", "https://b")
    for bad, needle in [
        ("http://a:8470,cache:8470", "'cache:8470': expected http(s)://host[:port]"),
        ("http://[::1", "'http://[::1': not a valid URL (Invalid IPv6 URL); expected http(s)://host[:port]"),
        ("http://a:99999", "not a valid URL (Port out of range"),
        ("http://:8470", "expected http(s)://host[:port]"),
    ]:
        with pytest.raises(EnvSettingError, match=re.escape(needle)):
            env_urls("X", env={"X": bad})


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        ("GEM_NODE_CACHE", "disabled", "GEM_NODE_CACHE='disabled': expected one of hostPath, on, true, 1, off,"),
        ("GEM_MODEL_PEERS", "cache:8470", "GEM_MODEL_PEERS: 'cache:8470': expected http(s)://host[:port]"),
    ],
)
def test_gemop_run_names_a_bad_cache_setting(name: str, value: str, line: str) -> None:
    env = {**os.environ, name: value, "KUBECONFIG": "/nonexistent"}
    argv = [sys.executable, "-m", "gem_operator.cli", "run", "-A", "--metrics-port", "0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"gemop run: {line}"), done.stderr


@pytest.mark.parametrize(
    ("kubeconfig", "line"),
    [
        (None, "no Kubernetes client configuration: {k} does not exist and this is not a pod"),
        ("clusters: [\n", "cannot load the Kubernetes client configuration from {k}: while parsing a flow node"),
        (
            "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\ncurrent-context: nope\nusers: []\n",
            "cannot load the Kubernetes client configuration from {k}: Invalid kube-config file. Expected object "
            "with name nope",
        ),
        (
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://[::1'}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\nusers: [{name: u, user: {}}]\n",
            "cannot load the Kubernetes client configuration from {k}: "
            "server 'http://[::1': not a valid URL (Invalid IPv6 URL)",
        ),
    ],
)
def test_gemop_run_names_a_kubeconfig_it_cannot_load(tmp_path: Path, kubeconfig: str | None, line: str) -> None:
    """kopf's startup retried such a file every 60 s, with a traceback each time, for ever."""
    path = tmp_path / "kubeconfig"
    if kubeconfig is not None:
        path.write_text(kubeconfig)
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"} | {"KUBECONFIG": str(path)}
    argv = [sys.executable, "-m", "gem_operator.cli", "run", "-A", "--metrics-port", "0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gemop run: " + line.format(k=path)), last
    assert last.endswith("point $KUBECONFIG at a kubeconfig kubectl can use, or run in a pod with a service account")


@pytest.mark.parametrize(
    ("name", "value", "expects"),
    [
        ("GEM_RESYNC_SECONDS", "abc", "a finite number > 0 and <= 3600"),
        ("GEM_RESYNC_SECONDS", "0", "a finite number > 0 and <= 3600"),
        ("GEM_PEERING_LIFETIME", "-1", "a whole number >= 1"),
        ("GEM_CPU_BUDGET_SECONDS", "nan", "a finite number > 0"),
        ("GEM_METRICS_PORT", "99999", "a whole number >= 0 and <= 65535"),
    ],
)
def test_gemop_run_names_a_bad_environment_variable(name: str, value: str, expects: str) -> None:
    """Read with a bare float(), `abc` was a traceback and `0` or `nan` reached kopf's timers; now
    `gemop run` stops before it starts, with one line naming the variable (exit 2)."""
    env = {**os.environ, name: value, "KUBECONFIG": "/nonexistent"}
    argv = [sys.executable, "-m", "gem_operator.cli", "run", "-A", "--metrics-port", "0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"gemop run: {name}={value!r}: expected {expects}"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("argv", [["demo"], ["sim", "up", "--operator"]])
def test_commands_that_run_the_operator_in_process_name_it_too(argv: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "GEM_RESYNC_SECONDS": "nan"}
    cmd = [sys.executable, "-m", "gem_operator.cli", *argv]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"gemop {argv[0]}: GEM_RESYNC_SECONDS='nan': expected a finite number > 0 and <= 3600"
