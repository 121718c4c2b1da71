"""Worker for test_parallelism.py: one gloo world, several meshes, each compared with the plain model.

``python _parallel_worker.py OUT.json WORLD SCENARIO...`` where SCENARIO is ``pp,dp_replicate,dp_shard,cp,tp,ep``.
For every scenario each rank builds the tiny Kunlun model with the same seed, runs one
forward + backward through :class:`DenseRunner` (TP, FSDP2, pipeline, cp, ep as the mesh says)
and compares loss, logits, dense gradients and embedding-output gradients with the plain
single-process model on the same batches. Rank 0 writes the worst errors per scenario.
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.multiprocessing.spawn import spawn

from gem_workloads.data import MixingLoader, SyntheticConfig, SyntheticUniverse, cap_schema
from gem_workloads.models import KunlunModel, get_preset
from gem_workloads.models.common import pooled_tokens, sequence_embeddings
from gem_workloads.models.features import Batch
from gem_workloads.training.dense import DenseRunner, microbatch_rows
from gem_workloads.training.env import load_env
from gem_workloads.training.parallel import build_parallel
from gem_workloads.training.pipeline import prune_to_stage, split_layers
from gem_workloads.training.trainer import masked_bce

BATCH, MICRO = 16, 2


def _lookups(model: KunlunModel, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    s = model.schema
    user = pooled_tokens(model.sparse.user, batch.user.categorical, s.user_names)
    seq, _ = sequence_embeddings(model.sparse.sequence, batch.user.sequence, s.sequence_names, model.config.seq_len)
    item = pooled_tokens(model.sparse.item, batch.candidate.categorical, s.item_names)
    return user.detach().requires_grad_(), seq.detach().requires_grad_(), item.detach().requires_grad_()


def _reference(
    model: KunlunModel, batch: Batch
) -> tuple[float, torch.Tensor, dict[str, torch.Tensor], list[torch.Tensor]]:
    """Loss, logits, dense grads and embedding-output grads of the plain model (no parallelism)."""
    emb = _lookups(model, batch)
    state_tokens = torch.cat([emb[0], model.dense_token(batch.user.dense)], dim=1)
    from gem_workloads.models.common import UserState

    valid = (
        torch.arange(model.config.seq_len)[None, :]
        < batch.user.sequence[model.schema.sequence_names[0]].lengths().clamp(max=model.config.seq_len)[:, None]
    )
    h = model.sequence_input(emb[1], valid)
    summaries, summary, j = [], None, 0
    for layer in range(model.config.num_layers):
        if model.config.computes_sequence(layer):
            h = model.attention[j](h, valid)
            summary = model.summarisers[j](h, valid)
            j += 1
        summaries.append(summary)
    state = UserState(state_tokens, torch.stack(summaries, dim=1))
    x = model.token_norm(torch.cat([state.tokens, emb[2], model.domain_token(batch.candidate.domain)], dim=1))
    for layer, interaction in enumerate(model.interactions):
        x = interaction(torch.cat([state.summaries[:, layer], x], dim=1), x, batch.candidate.domain)
    logits = model.heads(torch.cat([x.flatten(1), state.summaries[:, -1].flatten(1)], dim=1))
    loss = masked_bce(logits, batch.labels, batch.label_mask)
    loss.backward()
    grads = {
        n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None and not n.startswith("sparse.")
    }
    return float(loss), logits.detach(), grads, [e.grad.clone() for e in emb if e.grad is not None]


def _scenario(spec: str, world: int, loader_parts: Any) -> dict[str, Any]:
    pp, dpr, ds, cp, tp, ep = (int(v) for v in spec.split(","))
    cfg, schema, sources = loader_parts
    env = load_env(
        {
            "WORLD_SIZE": str(world),
            "GEM_MESH_SHAPE": f"pp={pp},dp_replicate={dpr},dp_shard={ds},cp={cp},tp={tp}",
            "GEM_EP": str(ep),
        }
    )
    par = build_parallel(env, "cpu")
    batches = [
        MixingLoader(sources, [1, 1, 1], BATCH, seed=3, shard=s, schema=schema).batch(1) for s in range(par.data_shards)
    ]
    # reference: mean over the data shards of the plain model's gradients
    ref_losses, ref_grads, ref_logits, ref_emb = [], {}, None, None
    for s, b in enumerate(batches):
        torch.manual_seed(0)
        loss, logits, grads, emb_grads = _reference(KunlunModel(schema, cfg), b)
        ref_losses.append(loss)
        for n, g in grads.items():
            ref_grads[n] = ref_grads.get(n, 0) + g / len(batches)
        if s == par.data_shard:
            ref_logits, ref_emb = logits, emb_grads
    torch.manual_seed(0)
    model = KunlunModel(schema, cfg)
    batch = batches[par.data_shard]
    emb = _lookups(model, batch)
    layers = split_layers(cfg.num_layers, pp)[par.pp_rank]
    first, last = par.pp_rank == 0, par.pp_rank == pp - 1
    prune_to_stage(model, layers, first=first, last=last)
    runner = DenseRunner(model, par, torch.device("cpu"), microbatches=MICRO)
    out = runner.step(emb if first else None, batch)
    loss = out.loss.clone()
    dist.all_reduce(loss)
    result: dict[str, Any] = {"loss": float(loss) / (world // pp), "ref_loss": sum(ref_losses) / len(ref_losses)}
    grad_err, checked = 0.0, 0
    for name, p in model.named_parameters():
        if name.startswith("sparse.") or p.grad is None:
            continue
        g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        err = float((g - ref_grads[name]).abs().max() / (ref_grads[name].abs().max() + 1e-6))
        grad_err, checked = max(grad_err, err), checked + 1
    logit_err = 0.0
    if out.logits is not None:
        assert ref_logits is not None
        expect = microbatch_rows(ref_logits, runner.microbatches, par.cp_rank, cp)
        logit_err = float((out.logits - expect).abs().max())
    emb_err = 0.0
    if par.data_shards == 1:
        # the tp x cp ranks of stage 0 each send back a scaled share: their sum is the gradient
        for mine, ref in zip(
            emb if first else [torch.zeros_like(r) for r in ref_emb or []], ref_emb or [], strict=True
        ):
            total = (mine.grad if mine.grad is not None else torch.zeros_like(mine)).clone()
            dist.all_reduce(total)
            emb_err = max(emb_err, float((total - ref).abs().max() / (ref.abs().max() + 1e-6)))
    stats = torch.tensor([grad_err, logit_err, emb_err, float(checked)])
    worst = stats.clone()
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    n_checked = stats[3:].clone()
    dist.all_reduce(n_checked)
    result.update(grad_rel_err=float(worst[0]), logit_err=float(worst[1]), emb_rel_err=float(worst[2]))
    result["params_checked"] = int(n_checked)
    result["params_total"] = sum(
        1 for n, _ in KunlunModel(schema, cfg).named_parameters() if not n.startswith("sparse.")
    )
    return result


def _worker(rank: int, world: int, port: int, out: str, specs: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    cfg = get_preset("tiny")
    universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=0))
    schema = cap_schema(universe.schema, cfg.max_table_rows)
    sources = [universe.domain(i) for i in range(3)]
    results = {spec: _scenario(spec, world, (cfg, schema, sources)) for spec in specs}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = int(sock.getsockname()[1])
    n = int(sys.argv[2])
    spawn(_worker, args=(n, free, sys.argv[1], sys.argv[3:]), nprocs=n, join=True)
