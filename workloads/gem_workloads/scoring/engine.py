"""Model loading and scoring, and the dynamic batcher in front of it.

Scoring runs on one dedicated thread (torch releases the GIL, the event loop stays free to
accept and reject requests). The batcher takes whatever requests are queued (up to
``max_batch_requests`` requests and ``max_batch_candidates`` candidates, waiting at most
``batch_timeout_s`` for more) and scores them in one model call: with sharing, each user's
sequence is encoded once and broadcast to that request's candidates.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch

from ..data.blocks import cap_schema
from ..data.synthetic import SyntheticConfig, synthetic_schema
from ..models import FeatureSchema, ModelConfig, build_model, devices, get_preset
from ..models.devices import DeviceError, module_device, same_device
from ..models.features import CandidateFeatures, UserFeatures
from ..models.model_dir import LoadedModel, load_model_dir
from ..models.vertical import VerticalModel
from .request import RankRequest, collate_requests
from .side_inputs import batch_side_inputs


class ScoringModel(Protocol):
    def encode_user(self, user: UserFeatures) -> object: ...
    def score_candidates(
        self, user_state: object, candidates: CandidateFeatures, user_index: torch.Tensor | None = None
    ) -> torch.Tensor: ...
    def embed_candidates(
        self, user_state: object, candidates: CandidateFeatures, user_index: torch.Tensor | None = None
    ) -> torch.Tensor: ...


def preset_model(preset: str, kind: str = "kunlun", seed: int = 0, seq_len: int | None = None) -> LoadedModel:
    """A randomly initialised model of ``preset`` on the synthetic schema (demos, tests, benchmarks)."""
    config: ModelConfig = get_preset(preset)
    if seq_len is not None:
        config = config.with_(seq_len=seq_len)
    schema = cap_schema(synthetic_schema(SyntheticConfig(seq_len=config.seq_len)), config.max_table_rows)
    torch.manual_seed(seed)
    model = build_model(kind, config, schema)
    model.eval()
    return LoadedModel(model, kind, config, schema, f"{preset}-seed{seed}")


def load_model(model_dir: str | None, preset: str | None, device: torch.device) -> LoadedModel:
    if model_dir:
        return load_model_dir(Path(model_dir), device)
    loaded = preset_model(preset or "tiny")
    loaded.model.to(device)
    return loaded


@dataclass
class Engine:
    """A loaded model that scores batches of validated requests (call from one thread).

    ``device``: where the model's weights are and where every input is moved (default: the
    model's own device; a different one is refused, since every request would then fail).
    ``copy_user_state``: give each candidate its own copy of the user state (the path before
    candidates read it by index; kept as the baseline of ``bench/serving_sharing.py``).
    """

    loaded: LoadedModel
    device: torch.device | None = None
    copy_user_state: bool = False

    def __post_init__(self) -> None:
        held = module_device(self.loaded.model)
        if self.device is None:
            self.device = held or torch.device("cpu")
        elif held is not None and not same_device(held, self.device):
            raise DeviceError(f"the model's weights are on {held}, the engine would move its inputs to {self.device}")

    @property
    def on(self) -> torch.device:
        assert self.device is not None
        return self.device

    @property
    def schema(self) -> FeatureSchema:
        return self.loaded.schema

    @property
    def seq_len(self) -> int:
        return self.loaded.config.seq_len

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.loaded.schema.tasks]

    def score(self, requests: list[RankRequest], share: bool) -> list[npt.NDArray[np.float32]]:
        """Probabilities ``[n_i, num_tasks]`` per request."""
        probs = devices.to_numpy(self.probabilities(requests, share))
        return _split(probs, requests)

    @torch.inference_mode()
    def probabilities(self, requests: list[RankRequest], share: bool) -> torch.Tensor:
        """Probabilities ``[sum n_i, num_tasks]`` on the engine's device."""
        inputs = collate_requests(requests, self.schema, share)
        model: ScoringModel = self.loaded.model  # type: ignore[assignment]
        index = inputs.user_index.to(self.on) if inputs.user_index is not None else None
        if isinstance(model, VerticalModel):  # knowledge-transfer inputs from the store (see .side_inputs)
            side = batch_side_inputs(
                model, [r.side for r in requests], [r.num_candidates for r in requests], share, self.on
            )
            logits = model.score(inputs.user.to(self.on), inputs.candidates.to(self.on), side, index)
        else:
            state = model.encode_user(inputs.user.to(self.on))
            if self.copy_user_state and index is not None:
                state, index = state.select(index), None  # type: ignore[attr-defined]
            logits = model.score_candidates(state, inputs.candidates.to(self.on), index)
        return torch.sigmoid(logits.float())

    @torch.inference_mode()
    def embed(self, requests: list[RankRequest]) -> tuple[list[npt.NDArray[np.float32]], npt.NDArray[np.float32]]:
        """User-ad embeddings ``[n_i, D]`` per request (user encoded once per request), and one
        behaviour vector per request's user (its final sequence summary, mean over seeds)."""
        emb, users = self.embeddings(requests)
        return _split(devices.to_numpy(emb), requests), devices.to_numpy(users)

    @torch.inference_mode()
    def embeddings(self, requests: list[RankRequest]) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`embed` on the engine's device: ``([sum n_i, D], [num requests, d])``."""
        inputs = collate_requests(requests, self.schema, share=True)
        model: ScoringModel = self.loaded.model  # type: ignore[assignment]
        state = model.encode_user(inputs.user.to(self.on))
        index = inputs.user_index.to(self.on) if inputs.user_index is not None else None
        emb = model.embed_candidates(state, inputs.candidates.to(self.on), index)
        return emb, _behaviour_vectors(state)


def _split(rows: npt.NDArray[np.float32], requests: list[RankRequest]) -> list[npt.NDArray[np.float32]]:
    out, start = [], 0
    for r in requests:
        out.append(rows[start : start + r.num_candidates])
        start += r.num_candidates
    return out


def _behaviour_vectors(state: object) -> torch.Tensor:
    summaries: torch.Tensor = state.summaries  # type: ignore[attr-defined]
    tokens: torch.Tensor = state.tokens  # type: ignore[attr-defined]
    return summaries[:, -1].mean(1) if summaries.numel() else tokens.mean(1)


class QueueFull(Exception):
    """The batcher's bounded queue is full: the server answers 503 with Retry-After."""


@dataclass
class _Pending:
    request: RankRequest
    future: asyncio.Future[npt.NDArray[np.float32]]
    enqueued: float


class Batcher:
    """Bounded queue + one scoring thread; ``submit`` returns a request's probabilities."""

    def __init__(
        self,
        engine: Engine,
        share: bool,
        max_batch_requests: int,
        max_batch_candidates: int,
        max_queue: int,
        batch_timeout_s: float = 0.002,
        on_batch: Callable[[int, int, float], None] | None = None,
    ) -> None:
        self.engine, self.share = engine, share
        self.max_batch_requests, self.max_batch_candidates = max_batch_requests, max_batch_candidates
        self.batch_timeout_s = batch_timeout_s
        self.queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=max_queue)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gem-score")
        self.on_batch = on_batch
        self._task: asyncio.Task[None] | None = None
        self._carry: _Pending | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.executor.shutdown(wait=False, cancel_futures=True)

    @property
    def depth(self) -> int:
        return self.queue.qsize()

    async def submit(self, request: RankRequest) -> npt.NDArray[np.float32]:
        fut: asyncio.Future[npt.NDArray[np.float32]] = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait(_Pending(request, fut, time.perf_counter()))
        except asyncio.QueueFull:
            raise QueueFull() from None
        return await fut

    async def _collect(self) -> list[_Pending]:
        first = await self.queue.get()
        batch, cands = [first], first.request.num_candidates
        deadline = time.perf_counter() + self.batch_timeout_s
        while len(batch) < self.max_batch_requests:
            if self.queue.empty():
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    nxt = await asyncio.wait_for(self.queue.get(), left)
                except TimeoutError:
                    break
            else:
                nxt = self.queue.get_nowait()
            if cands + nxt.request.num_candidates > self.max_batch_candidates:
                # Too big to join: it heads the next batch (put back at the front is not possible
                # with asyncio.Queue, so it is scored right after this one).
                self._carry = nxt
                break
            batch.append(nxt)
            cands += nxt.request.num_candidates
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._carry is not None:
                batch, self._carry = [self._carry], None
            else:
                batch = await self._collect()
            live = [p for p in batch if not p.future.done()]  # a client that went away is skipped
            if not live:
                continue
            t0 = time.perf_counter()
            try:
                results = await loop.run_in_executor(
                    self.executor, self.engine.score, [p.request for p in live], self.share
                )
            except Exception as exc:  # a scoring failure fails this batch's requests, not the server
                for p in live:
                    if not p.future.done():
                        p.future.set_exception(exc)
                continue
            if self.on_batch is not None:
                self.on_batch(len(live), sum(p.request.num_candidates for p in live), time.perf_counter() - t0)
            for p, r in zip(live, results, strict=True):
                if not p.future.done():
                    p.future.set_result(r)
