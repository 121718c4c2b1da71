"""Serving precision plans: conversions, the quality gate, recording in the model directory, reporting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")
pytest.importorskip("aiohttp")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from gem_workloads.models.model_dir import save_model_dir  # noqa: E402
from gem_workloads.scoring import precision_plan  # noqa: E402
from gem_workloads.scoring.engine import load_model, preset_model  # noqa: E402
from gem_workloads.scoring.precision import PLAN_FILE, Cast, applies, apply_plan, convert, unit_names  # noqa: E402
from gem_workloads.scoring.precision_plan import plan_precision, resolve_precision  # noqa: E402
from gem_workloads.serving.app import ServerConfig, create_app  # noqa: E402
from gem_workloads.serving.plan_precision import main as plan_main  # noqa: E402
from gem_workloads.serving.plan_precision import report  # noqa: E402

pytestmark = pytest.mark.workloads
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_conversions_stay_close_to_fp32_and_leave_the_original_alone() -> None:
    torch.manual_seed(0)
    unit = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
    x = torch.randn(128, 32)
    with torch.no_grad():
        ref = unit(x)
    for precision, tol in (("int8", 0.05), ("bf16", 0.05)):
        with torch.no_grad():
            out = convert(unit, precision)(x)
        assert out.dtype == torch.float32
        assert float((out - ref).abs().max()) < tol * float(ref.abs().max()), precision
    assert unit[0].weight.dtype == torch.float32  # a copy was converted
    assert isinstance(convert(unit, "bf16"), Cast)
    assert (
        applies(unit, "int8") and not applies(torch.nn.LayerNorm(8), "int8") and applies(torch.nn.LayerNorm(8), "bf16")
    )
    with pytest.raises(ValueError, match="unknown precision"):
        convert(unit, "fp4")


def test_plan_names_only_real_units() -> None:
    loaded = preset_model("tiny", seed=1)
    assert {"heads", "interactions.0", "attention.0", "summarisers.0"} <= set(unit_names(loaded.model))
    with pytest.raises(ValueError, match="does not have"):
        apply_plan(loaded.model, {"nope.0": "bf16"})


def test_fp32_plan_measures_nothing_and_changes_nothing() -> None:
    loaded = preset_model("tiny", seed=1)
    plan = plan_precision(loaded, "fp32", CPU)
    assert set(plan.layers.values()) == {"fp32"} and plan.fp32_ms is None


def test_forced_bf16_converts_every_unit_and_reports_its_quality() -> None:
    loaded = preset_model("tiny", seed=1)
    before = {n: p.clone() for n, p in loaded.model.state_dict().items()}
    plan = plan_precision(loaded, "bf16", CPU, reps=1)
    assert set(plan.layers.values()) == {"bf16"}
    assert plan.auc_fp32 is not None and plan.auc is not None  # the synthetic holdout has labels
    assert 0 < plan.mean_score_error < 0.05  # bf16 rounds: scores move, a little
    assert plan.fp32_ms is not None and plan.plan_ms is not None
    after = loaded.model.state_dict()
    assert all(torch.equal(before[n], after[n]) for n in before)  # planning leaves the model in fp32
    with pytest.raises(ValueError, match="choose one of"):
        plan_precision(loaded, "int4", CPU)


def test_auto_plan_passes_the_gate_and_is_never_slower_end_to_end() -> None:
    loaded = preset_model("small", seed=1)
    plan = plan_precision(loaded, "auto", CPU, reps=3)
    assert set(plan.layers.values()) <= {"fp32", "int8", "bf16"}  # no fp8 on a CPU
    assert any(n.startswith("fp8:") for n in plan.notes)
    delta = plan.auc_delta
    assert delta is not None and abs(delta) <= 0.001
    assert plan.mean_score_error <= 0.005
    assert plan.plan_ms is not None and plan.fp32_ms is not None and plan.plan_ms <= plan.fp32_ms
    if set(plan.layers.values()) == {"fp32"}:
        assert plan.plan_ms == plan.fp32_ms


def test_tight_gate_sends_layers_back_to_fp32() -> None:
    loaded = preset_model("tiny", seed=1)
    plan = plan_precision(loaded, "auto", CPU, reps=1, min_speedup=0.0, max_score_error=0.0, max_auc_drop=0.0)
    # min_speedup 0 proposes a low precision wherever one exists; a zero-error gate rejects them all.
    assert set(plan.layers.values()) == {"fp32"}
    assert any("failed the quality gate" in n for n in plan.notes)


def test_plan_is_recorded_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = preset_model("tiny", seed=2)
    save_model_dir(tmp_path, src.model, src.kind, src.config, src.schema, "v1")
    term = tmp_path / "term" / "message"
    term.parent.mkdir()
    monkeypatch.setenv("GEM_TERMINATION_LOG", str(term))
    assert plan_main(["--model", str(tmp_path), "--precision", "bf16", "--device", "cpu", "--candidates", "8"]) == 0
    recorded = json.loads((tmp_path / PLAN_FILE).read_text())
    assert recorded["requested"] == "bf16" and set(recorded["layers"].values()) == {"bf16"}
    message = json.loads(term.read_text())["precision"]
    assert message["layers"] == {"bf16": len(recorded["layers"])} and message["device"] == "cpu"

    def no_planning(*_: Any, **__: Any) -> Any:
        raise AssertionError("the recorded plan should have been reused")

    monkeypatch.setattr(precision_plan, "plan_precision", no_planning)
    loaded = load_model(str(tmp_path), None, CPU)
    resolve_precision(loaded, "bf16", CPU, str(tmp_path))
    assert isinstance(loaded.model.get_submodule("heads"), Cast)
    assert loaded.precision is not None and loaded.precision["layers"] == message["layers"]
    assert not report({"x": 1}, str(tmp_path / "absent" / "log"))
    # an unreadable plan (here nested too deeply for json's decoder) is planned again, not a traceback
    (tmp_path / PLAN_FILE).write_text("[" * 100_000 + "]" * 100_000)
    assert precision_plan.load_plan(tmp_path) is None


async def test_server_reports_its_plan() -> None:
    loaded = preset_model("tiny", seed=3)
    resolve_precision(loaded, "bf16", CPU)
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(ServerConfig(), lambda: loaded)))
    await client.start_server()
    try:
        for _ in range(500):
            r = await client.get("/readyz")
            if r.status == 200:
                break
            await __import__("asyncio").sleep(0.02)
        ready = await r.json()
        assert ready["precision"]["requested"] == "bf16"
        info = await (await client.get("/v1/model")).json()
        assert info["precision"]["layers"] == ready["precision"]["layers"]
        metrics = await (await client.get("/metrics")).text()
        assert 'gem_ranking_precision_layers{precision="bf16"}' in metrics
        r = await client.post("/v1/rank", json=(await (await client.get("/v1/example-request")).json()))
        assert r.status == 200
    finally:
        await client.close()
