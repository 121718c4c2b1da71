"""The device tier: every entrypoint runs on (fake) CUDA tensors, so a tensor left on the CPU fails here.

FakeTensorMode gives tensors that carry a device, a shape and a dtype but no data: a CUDA one on a
machine without a GPU. Mixing it with a CPU tensor raises the same "found at least two devices"
error a real GPU would. Each test runs an entrypoint's own code on them (the ranking server's
load and scoring, the precompute worker's embedding batches, a training step, the foundation
pass, the transfer evaluation end to end); the one host copy of results
(:func:`gem_workloads.models.devices.to_numpy`) is checked to come back to the CPU and is
answered with zeros, since fake tensors hold no values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from gem_workloads.data.blocks import cap_schema  # noqa: E402
from gem_workloads.data.mixing import MixingLoader  # noqa: E402
from gem_workloads.data.synthetic import SyntheticConfig, SyntheticUniverse  # noqa: E402
from gem_workloads.data.timeline import SyntheticTimeline, TimelineConfig  # noqa: E402
from gem_workloads.models import build_model, devices, get_preset  # noqa: E402
from gem_workloads.models.devices import DeviceError, resolve_device  # noqa: E402
from gem_workloads.models.kunlun import KunlunModel  # noqa: E402
from gem_workloads.precompute.worker import PrecomputeWorker, WorkerConfig, _Work  # noqa: E402
from gem_workloads.scoring.engine import Engine, preset_model  # noqa: E402
from gem_workloads.scoring.request import collate_requests, example_request, parse_request  # noqa: E402
from gem_workloads.serving.app import ServerConfig, ServerState  # noqa: E402
from gem_workloads.serving.metrics import ServerMetrics  # noqa: E402
from gem_workloads.training.distill import ExampleFeed, FitConfig, fit, predict  # noqa: E402
from gem_workloads.training.foundation_pass import run_pass  # noqa: E402
from gem_workloads.training.trainer import masked_bce, trainer_device  # noqa: E402

pytestmark = [pytest.mark.workloads, pytest.mark.devices]

CUDA = torch.device("cuda")
TINY_DATA = TimelineConfig(num_users=40, num_items=100, organic_per_user=8, impressions_per_user=4)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTensorMode]:
    host_copies: list[tuple[int, ...]] = []

    def to_numpy(t: Any) -> np.ndarray:
        host = t.detach().float().cpu()
        assert host.device.type == "cpu"
        shape = tuple(int(s) for s in host.shape)
        host_copies.append(shape)
        return np.zeros(shape, np.float32)

    def backward(loss: Any, *args: Any, **kwargs: Any) -> None:
        # The autograd engine asks the CUDA driver for a context, which fake tensors cannot give;
        # a backward's devices mirror its forward's, which is what runs here.
        assert loss.device.type == "cuda" and loss.requires_grad

    init = KunlunModel.__init__

    def padded_init(self: KunlunModel, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        # The packed layout reads its sizes to the host once per batch (allocation needs them),
        # which data-free tensors cannot give; the padded reference layout runs the same modules.
        self.padded_sequence = True

    monkeypatch.setattr(devices, "to_numpy", to_numpy)
    monkeypatch.setattr(torch.autograd, "backward", backward)
    monkeypatch.setattr(KunlunModel, "__init__", padded_init)
    torch.set_num_threads(1)
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
    mode.host_copies = host_copies  # type: ignore[attr-defined]
    yield mode  # entered by each test once its model and inputs are built (real tensors on the CPU)


def _requests(loaded: Any, sizes: tuple[int, ...]) -> list[Any]:
    seq = loaded.config.seq_len
    return [parse_request(example_request(loaded.schema, n, seq, seed=n), loaded.schema, seq, 64) for n in sizes]


def _on_fake_cuda(t: Any) -> bool:
    return t.device.type == "cuda" and type(t).__name__ == "FakeTensor"


@pytest.mark.parametrize("kind", ["kunlun", "dlrm", "vertical"])
def test_engine_scores_on_the_device_of_the_model(fake_cuda: FakeTensorMode, kind: str) -> None:
    loaded = preset_model("tiny", kind)
    reqs = _requests(loaded, (5, 9))
    with fake_cuda:
        loaded.model.to(CUDA)
        engine = Engine(loaded, CUDA)
        for share in (True, False):
            probs = engine.probabilities(reqs, share)
            assert _on_fake_cuda(probs) and tuple(probs.shape) == (14, loaded.schema.num_tasks)
        out = engine.score(reqs, True)
        assert [o.shape for o in out] == [(5, loaded.schema.num_tasks), (9, loaded.schema.num_tasks)]
        emb, users = engine.embeddings(reqs)
        assert _on_fake_cuda(emb) and _on_fake_cuda(users)


def test_a_cpu_input_to_a_cuda_model_fails_here_as_on_a_gpu(fake_cuda: FakeTensorMode) -> None:
    loaded = preset_model("tiny")
    inputs = collate_requests(_requests(loaded, (4,)), loaded.schema, True)
    model = loaded.model
    assert isinstance(model, KunlunModel)
    with fake_cuda:
        model.to(CUDA)
        with pytest.raises(Exception, match="devices"):
            model.encode_user(inputs.user)  # what the server did: CUDA weights, CPU inputs
        with pytest.raises(DeviceError, match="cuda"):
            Engine(loaded, torch.device("cpu"))  # refused when built, not on every request


def test_ranking_server_loads_its_engine_on_the_configured_device(fake_cuda: FakeTensorMode) -> None:
    loaded = preset_model("tiny")
    reqs = _requests(loaded, (3,))

    async def load(cfg: ServerConfig) -> ServerState:
        state = ServerState(cfg, lambda: loaded, ServerMetrics())
        await state.load_model()
        if state.batcher is not None:
            await state.batcher.stop()
        return state

    with fake_cuda:
        loaded.model.to(CUDA)
        state = asyncio.run(load(ServerConfig(device="cuda")))
        assert state.engine is not None and state.engine.device == CUDA
        assert state.engine.score(reqs, True)[0].shape == (3, loaded.schema.num_tasks)
        wrong = asyncio.run(load(ServerConfig(device="cpu")))
        assert wrong.engine is None and wrong.load_error is not None and "cuda" in wrong.load_error


class _Stream:
    """The worker's Redis, as far as building it goes (``_compute`` writes nothing)."""

    def xgroup_create(self, *args: Any, **kwargs: Any) -> None:
        return None

    def register_script(self, script: str) -> Any:
        return lambda *args, **kwargs: None


def test_precompute_worker_embeds_on_the_device(fake_cuda: FakeTensorMode) -> None:
    loaded = preset_model("tiny")
    reqs = _requests(loaded, (6, 3, 5))
    work = [_Work(f"1-{i}", f"u{i}", r, [(str(k), "g") for k in range(r.num_candidates)]) for i, r in enumerate(reqs)]
    with fake_cuda:
        loaded.model.to(CUDA)
        worker = PrecomputeWorker(WorkerConfig(stream="s", group="g", batch_size=8), _Stream(), Engine(loaded, CUDA))
        worker._compute(work)
    assert isinstance(loaded.model, KunlunModel)
    width = loaded.model.embedding_size
    assert [sum(e.shape[0] for e in w.embeddings) for w in work] == [6, 3, 5]
    assert all(e.shape[1] == width for w in work for e in w.embeddings)
    assert fake_cuda.host_copies  # type: ignore[attr-defined]


def test_training_step_keeps_everything_on_the_device(fake_cuda: FakeTensorMode) -> None:
    cfg = get_preset("tiny")
    universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=0))
    schema = cap_schema(universe.schema, cfg.max_table_rows)
    loader = MixingLoader([universe.domain(i) for i in range(3)], [1, 1, 1], 16, seed=1, schema=schema)
    model = build_model("kunlun", cfg, schema)
    cpu_batch = loader.batch(0)
    with fake_cuda:
        model.to(CUDA)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        batch = cpu_batch.to(CUDA)  # what Trainer.run does with every batch
        loss = masked_bce(model(batch), batch.labels, batch.label_mask)
        assert _on_fake_cuda(loss) and loss.requires_grad
        # No backward on fake CUDA (see the fixture); the optimizer step runs on device gradients.
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        assert all(_on_fake_cuda(p) for p in model.parameters())
        assert all(_on_fake_cuda(v) for st in opt.state.values() for v in st.values() if v.dim() > 0)


def test_foundation_pass_and_transfer_training_run_on_the_device(fake_cuda: FakeTensorMode) -> None:
    data = SyntheticTimeline(TINY_DATA)
    schema = cap_schema(data.schema, 2000)
    foundation = build_model("kunlun", get_preset("tiny"), schema)
    assert isinstance(foundation, KunlunModel)
    rows = data.examples[:48]
    with fake_cuda:
        foundation.to(CUDA)
        fit(foundation, ExampleFeed(data, rows, schema, 16), FitConfig(epochs=1, batch_size=16), device=CUDA)
        probs, labels, _ = predict(foundation, ExampleFeed(data, rows, schema, 16), batch_size=32, device=CUDA)
        assert probs.shape == labels.shape
        out = run_pass(foundation, data, rows, "f-1", batch_size=32, device=CUDA)
    assert out.soft.shape == (48, schema.num_tasks) and out.solaris.shape[0] == 48


@pytest.mark.slow
def test_transfer_eval_runs_end_to_end_on_the_device(
    fake_cuda: FakeTensorMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gem_workloads.transfer import experiment

    monkeypatch.setattr(experiment, "resolve_device", lambda flag: torch.device(flag or "cpu"))
    build = experiment.build_model  # type: ignore[attr-defined]

    def build_on_the_cpu(*args: Any, **kwargs: Any) -> Any:
        with unset_fake_temporarily():  # real parameters, which the experiment then moves to the device
            return build(*args, **kwargs)

    monkeypatch.setattr(experiment, "build_model", build_on_the_cpu)
    cfg = experiment.EvalConfig(
        foundation_preset="tiny",
        vertical_preset="tiny",
        foundation_epochs=1,
        vertical_epochs=1,
        memory_len=4,
        synthetic=TINY_DATA,
        vertical_overrides={"seq_len": 4, "block_size": 4},
        coverages=(1.0, 0.0),
        device="cuda",
    )
    with fake_cuda:
        result = experiment.run(cfg)
    assert {"alone", "kd", "kd+loopfm"} <= set(result["variants"])


def test_devices_come_from_the_flag_then_the_environment() -> None:
    assert resolve_device("cpu", {}) == torch.device("cpu")
    assert resolve_device(None, {"GEM_DEVICE": "cpu"}) == torch.device("cpu")
    assert resolve_device("auto", {"GEM_DEVICE": "meta"}) == torch.device("meta")
    assert trainer_device("cpu", 3) == torch.device("cpu")
    with pytest.raises(DeviceError, match="device 'gpu"):
        resolve_device("gpu0", {})
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA"):
            resolve_device(None, {"GEM_DEVICE": "cuda"})
