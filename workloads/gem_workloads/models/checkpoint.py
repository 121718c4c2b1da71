"""Load a training checkpoint into an unsharded model (serving, evaluation, export).

Training writes ``torch.distributed.checkpoint`` directories whose ``model`` entry holds the
embedding tables as TorchRec ShardedTensors and the dense parameters as FSDP2 DTensors, under the
same parameter names as the plain model. DCP reshards on load, so one process without a process
group can read the whole model back into ordinary tensors.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn
from torch.distributed.checkpoint.state_dict_loader import load


def load_trained(model: nn.Module, checkpoint: str | Path) -> nn.Module:
    """Fill ``model`` (built with the same kind, preset and schema) from a ``step-NNNNNN`` directory."""
    state = model.state_dict()
    load({"model": state}, checkpoint_id=str(checkpoint), no_dist=True)
    model.load_state_dict(state)
    return model
