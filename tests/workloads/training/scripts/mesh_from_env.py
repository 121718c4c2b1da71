"""A user's own trainer, as small as it gets: build the DeviceMesh from the injected env and check it.

Run by the GEMTraining's torchrun launch (``training.command``); writes one JSON report per rank to
``$REPORT_DIR/rank-<RANK>.json``: the coordinates torch's DeviceMesh gives this rank, what
GEM_MESH_COORDS and the rank map say, and the members of its tensor-parallel group found by an
all_gather over that group (so the groups are the real process groups, not a recomputation).
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

names = []
shape = []
for part in os.environ["GEM_MESH_SHAPE"].split(","):
    name, size = part.split("=")
    names.append(name)
    shape.append(int(size))
rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
node_rank = int(os.environ["NODE_RANK"])
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=tuple(names))
coords = mesh.get_coordinate()
tp_group = mesh["tp"].get_group()
members = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size(tp_group))]
dist.all_gather(members, torch.tensor([rank]), group=tp_group)
rank_map = json.loads(Path(os.environ["GEM_RANK_MAP_FILE"]).read_text())
node = rank_map["nodes"][node_rank]
report = {
    "rank": rank,
    "argv": sys.argv[1:],
    "world": dist.get_world_size(),
    "mesh_coords": list(coords or []),
    "env_coords": json.loads(os.environ["GEM_MESH_COORDS"])[local_rank],
    "map_coords": node["coords"][local_rank],
    "map_rank": node["ranks"][local_rank],
    "tp_members": sorted(int(m) for m in members),
    "checkpoint_uri": os.environ.get("GEM_CHECKPOINT_URI"),
}
Path(os.environ["REPORT_DIR"], f"rank-{rank}.json").write_text(json.dumps(report))
dist.destroy_process_group()
