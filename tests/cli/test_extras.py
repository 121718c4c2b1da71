"""The testbed extra: `gemop demo`, `sim`, `loadtest` and `replay --plot` come through entry points.

Without the extra each says, in one line, what to install (exit 2); with it they are the testbed's
own; and the operator's runtime and CLI modules load neither the testbed, kmock nor matplotlib.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gem_operator import plugins
from gem_operator.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"
SERVICE = ROOT / "crds" / "samples" / "rankingservice.yaml"


def test_the_checkout_declares_the_testbed_commands_and_plotter() -> None:
    commands = plugins.declared(plugins.COMMANDS)
    assert {name: commands.get(name) for name in ("demo", "sim", "loadtest")} == {
        "demo": "gem_testbed.commands:add_demo",
        "sim": "gem_testbed.commands:add_sim",
        "loadtest": "gem_testbed.commands:add_loadtest",
    }
    assert plugins.declared(plugins.PLOTTERS).get("replay") == "gem_testbed.plots.replay:plot_report"
    add, missing = plugins.load(plugins.COMMANDS, "demo")
    assert callable(add) and missing is None


@pytest.fixture
def no_testbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As an install without the extra: no distribution declares the testbed's entry points."""
    monkeypatch.setattr(plugins, "declared", lambda group: {})


@pytest.mark.usefixtures("no_testbed")
@pytest.mark.parametrize(
    "argv", [["demo"], ["demo", "--fleet", "large", "--plot", "x.png"], ["sim", "up", "--run-pods"], ["loadtest"]]
)
def test_without_the_extra_each_command_names_it(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'gem-operator[testbed]'" in err and err.startswith(f"gemop {argv[0]}")


@pytest.mark.usefixtures("no_testbed")
def test_without_the_extra_help_still_lists_the_commands() -> None:
    help_text = " ".join(build_parser().format_help().split())  # argparse wraps lines
    for name in ("demo", "sim", "loadtest"):
        assert name in help_text
    assert help_text.count("(needs the testbed extra)") == 3


@pytest.mark.usefixtures("no_testbed")
def test_without_the_extra_replay_plot_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", "--trace", str(TRACE), "--service", str(SERVICE), "--plot", str(tmp_path / "r.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gemop replay: --plot needs the testbed extra") and "gem-operator[testbed]" in err
    assert not (tmp_path / "r.png").exists()


def test_a_declared_module_that_is_absent_reads_as_a_missing_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(plugins, "declared", lambda group: {"demo": "gem_testbed_not_installed.commands:add"})
    assert main(["demo"]) == 2
    assert "no module 'gem_testbed_not_installed'" in capsys.readouterr().err


def test_a_testbed_that_refuses_to_load_leaves_the_operator_commands_working(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As the emulator does when kmock is not the pinned version: an ImportError with a message.
    (tmp_path / "refusing_testbed.py").write_text("raise ImportError('adapts kmock 0.8 internals; found kmock 0.9')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "declared", lambda group: {"demo": "refusing_testbed:add_demo"})
    assert main(["version"]) == 0
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "found kmock 0.9" in err and "gem-operator[testbed]" in err


def test_a_broken_operator_import_is_not_mistaken_for_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugins, "declared", lambda group: {"demo": "gem_operator.no_such_module:add"})
    with pytest.raises(ModuleNotFoundError):
        plugins.load(plugins.COMMANDS, "demo")


def test_with_the_extra_the_commands_are_the_testbeds(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["sim", "up", "--help"])
    assert exit_.value.code == 0
    assert "--run-pods" in capsys.readouterr().out


def test_operator_modules_load_no_testbed_kmock_or_matplotlib() -> None:
    code = (
        "import sys\n"
        "import gem_operator.cli, gem_operator.controllers.reconcile, gem_operator.replay.engine\n"
        "import gem_operator.cli.plan, gem_operator.fleet\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('gem_testbed', 'kmock', 'matplotlib'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
