"""Model presets: ``tiny`` for CPU tests, ``small`` for CPU benchmarks, ``base``/``large`` for GPUs."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of the Kunlun-style model and of the DLRM-style baseline.

    ``seq_len`` is the longest behaviour sequence the model reads (a multiple of ``block_size``;
    longer histories keep their most recent ``seq_len`` events; shorter ones are not padded). ``comp_skip`` makes every
    odd layer skip the sequence modules and reuse the summary cached by the layer before.
    """

    name: str
    embedding_dim: int
    num_layers: int
    num_heads: int
    seq_len: int
    block_size: int
    num_seeds: int
    ffn_mult: int
    fmb_rank: int
    expert_hidden: int
    head_hidden: int
    comp_skip: bool = True
    # Cap on rows per embedding table (ids are hashed into it by the data sources).
    max_table_rows: int = 1_000_000
    # DLRM-style baseline: bottom / top MLP widths.
    dlrm_bottom: tuple[int, ...] = (64,)
    dlrm_top: tuple[int, ...] = (128, 64)
    # Vertical model's knowledge-transfer inputs (0 = input absent): the LoopFM historical memory
    # (the user's last ``memory_len`` foundation representations, each ``memory_width`` wide) and
    # the Solaris user-ad embedding (``solaris_width`` floats, plus its fallback tier).
    memory_len: int = 0
    memory_width: int = 0
    solaris_width: int = 0

    def __post_init__(self) -> None:
        if self.seq_len % self.block_size:
            raise ValueError(f"seq_len {self.seq_len} must be a multiple of block_size {self.block_size}")
        if self.embedding_dim % self.num_heads:
            raise ValueError(f"embedding_dim {self.embedding_dim} must be divisible by num_heads {self.num_heads}")
        if self.num_layers < 1:
            raise ValueError("num_layers must be >= 1")
        if min(self.memory_len, self.memory_width, self.solaris_width) < 0:
            raise ValueError("memory_len, memory_width and solaris_width must be >= 0")
        if (self.memory_len > 0) != (self.memory_width > 0):
            raise ValueError("memory_len and memory_width must both be set (the LoopFM memory) or both be 0")

    def computes_sequence(self, layer: int) -> bool:
        """Whether ``layer`` runs block attention + summarisation (CompSkip: even layers only)."""
        return not self.comp_skip or layer % 2 == 0

    @property
    def num_sequence_layers(self) -> int:
        return sum(self.computes_sequence(i) for i in range(self.num_layers))

    def with_(self, **changes: object) -> ModelConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        name="tiny",
        embedding_dim=16,
        num_layers=2,
        num_heads=2,
        seq_len=16,
        block_size=8,
        num_seeds=2,
        ffn_mult=2,
        fmb_rank=4,
        expert_hidden=32,
        head_hidden=16,
        max_table_rows=2_000,
        dlrm_bottom=(16,),
        dlrm_top=(32, 16),
    ),
    "small": ModelConfig(
        name="small",
        embedding_dim=32,
        num_layers=4,
        num_heads=2,
        seq_len=128,
        block_size=32,
        num_seeds=4,
        ffn_mult=2,
        fmb_rank=8,
        expert_hidden=128,
        head_hidden=64,
        max_table_rows=100_000,
        dlrm_bottom=(64, 32),
        dlrm_top=(128, 64),
    ),
    "base": ModelConfig(
        name="base",
        embedding_dim=256,
        num_layers=8,
        num_heads=8,
        seq_len=1024,
        block_size=64,
        num_seeds=16,
        ffn_mult=4,
        fmb_rank=32,
        expert_hidden=1024,
        head_hidden=512,
        max_table_rows=1_000_000,
        dlrm_bottom=(512, 256),
        dlrm_top=(1024, 512, 256),
    ),
    "large": ModelConfig(
        name="large",
        embedding_dim=512,
        num_layers=12,
        num_heads=8,
        seq_len=2048,
        block_size=64,
        num_seeds=32,
        ffn_mult=4,
        fmb_rank=64,
        expert_hidden=2048,
        head_hidden=1024,
        max_table_rows=4_000_000,
        dlrm_bottom=(1024, 512),
        dlrm_top=(2048, 1024, 512),
    ),
    # The foundation role on CPU (knowledge-transfer evaluation): a Kunlun-style model that reads
    # long histories. GPU deployments use ``base``/``large`` as the foundation model.
    "foundation": ModelConfig(
        name="foundation",
        embedding_dim=32,
        num_layers=2,
        num_heads=2,
        seq_len=64,
        block_size=32,
        num_seeds=4,
        ffn_mult=2,
        fmb_rank=8,
        expert_hidden=64,
        head_hidden=32,
        max_table_rows=100_000,
    ),
    # The vertical role: a small DLRM/Wukong-style ranker over the same features and a short
    # recent history (what an online ranker can afford per candidate).
    "vertical": ModelConfig(
        name="vertical",
        embedding_dim=16,
        num_layers=1,
        num_heads=1,
        seq_len=4,
        block_size=4,
        num_seeds=1,
        ffn_mult=1,
        fmb_rank=1,
        expert_hidden=1,
        head_hidden=1,
        max_table_rows=100_000,
        dlrm_bottom=(16,),
        dlrm_top=(64, 32),
    ),
}


def get_preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}") from None
