"""GEMTraining builders: names, owner references, torchrun env, rank map, suspend."""

from __future__ import annotations

import itertools
import json

import pytest

from gem_operator.api.mesh import Mesh
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.render.common import Owner
from gem_operator.render.training import render_training

OWNER = Owner("gem.dev/v1alpha1", "GEMTraining", "job", "ml", "uid-1", (("kueue.x-k8s.io/queue-name", "q"),))


def spec(**par: int) -> GEMTrainingSpec:
    return GEMTrainingSpec.model_validate({"parallelism": par, "checkpoint": {"uri": "s3://c/job"}})


def env(pod: dict[str, object]) -> dict[str, str]:
    containers = pod["spec"]["containers"]  # type: ignore[index]
    return {e["name"]: e["value"] for e in containers[0]["env"]}


def test_children_are_named_labelled_and_owned() -> None:
    kids = render_training(OWNER, spec(dpShard=2, tp=8))
    names = [c["metadata"]["name"] for c in kids.all()]
    assert names == ["job-rdzv", "job-config", "job-worker-0", "job-worker-1"]
    for child in kids.all():
        meta = child["metadata"]
        assert meta["namespace"] == "ml"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "gem.dev/v1alpha1",
                "kind": "GEMTraining",
                "name": "job",
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "gem-operator"
        assert meta["labels"]["gem.dev/instance"] == "job"
    # Kueue's queue label stays on the resource (one Workload admits the gang), never on pods.
    assert all(not k.startswith("kueue.x-k8s.io/") for p in kids.pods for k in p["metadata"]["labels"])
    assert kids.service["spec"]["clusterIP"] == "None"
    assert kids.service["spec"]["publishNotReadyAddresses"] is True


def test_torchrun_env_and_mesh_coordinates() -> None:
    kids = render_training(OWNER, spec(pp=2, dpShard=2, tp=4), resume_from="step-40")
    e1 = env(kids.pods[1])
    assert e1["WORLD_SIZE"] == "16" and e1["NNODES"] == e1["PET_NNODES"] == "2"
    assert e1["NODE_RANK"] == e1["PET_NODE_RANK"] == "1"
    assert e1["NPROC_PER_NODE"] == e1["PET_NPROC_PER_NODE"] == "8"
    assert e1["MASTER_PORT"] == e1["PET_MASTER_PORT"] == "29500"
    assert e1["GEM_RESUME_FROM"] == "step-40"
    coords = json.loads(e1["GEM_MESH_COORDS"])
    assert coords[0] == [1, 0, 0, 0, 0]  # rank 8 starts the second pipeline stage
    assert coords[7] == [1, 0, 1, 0, 3]


def test_rank_map_covers_every_rank_once() -> None:
    kids = render_training(OWNER, spec(pp=2, dpReplicate=2, dpShard=2, tp=4))
    rankmap = json.loads(kids.config["data"]["rankmap.json"])
    ranks = [r for node in rankmap["nodes"] for r in node["ranks"]]
    assert ranks == list(range(32))
    coords = [tuple(c) for node in rankmap["nodes"] for c in node["coords"]]
    assert sorted(coords) == sorted(itertools.product(range(2), range(2), range(2), range(1), range(4)))


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 8), (2, 3, 4, 1, 2), (4, 1, 2, 2, 1)])
def test_rank_coords_is_row_major(shape: tuple[int, ...]) -> None:
    expected = list(itertools.product(*(range(s) for s in shape)))
    world = 1
    for s in shape:
        world *= s
    assert [Mesh.of(shape).coords(r) for r in range(world)] == expected


def test_suspend_keeps_service_and_config_but_no_pods() -> None:
    s = spec(dpShard=2, tp=8).model_copy(update={"suspend": True})
    kids = render_training(OWNER, s)
    assert kids.pods == [] and kids.service and kids.config


def test_changed_spec_changes_the_pod_hash_only_when_it_matters() -> None:
    a = render_training(OWNER, spec(dpShard=2, tp=8)).pods[0]["metadata"]["annotations"]["gem.dev/spec-hash"]
    b = render_training(OWNER, spec(dpShard=2, tp=8)).pods[0]["metadata"]["annotations"]["gem.dev/spec-hash"]
    c = render_training(OWNER, spec(dpShard=4, tp=8)).pods[0]["metadata"]["annotations"]["gem.dev/spec-hash"]
    assert a == b != c


def test_placement_must_match_the_gang() -> None:
    with pytest.raises(ValueError, match="placement has 1 nodes, the gang needs 2"):
        render_training(OWNER, spec(dpShard=2, tp=8), node_names=["n1"])
    pinned = render_training(OWNER, spec(dpShard=2, tp=8), node_names=["n1", "n2"])
    for pod, node in zip(pinned.pods, ["n1", "n2"], strict=True):
        term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        expr = term["nodeSelectorTerms"][0]["matchExpressions"][0]
        assert expr == {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        assert pod["spec"]["schedulingGates"] == [{"name": "gem.dev/gang"}]
        assert "nodeName" not in pod["spec"]
    unpinned = render_training(OWNER, spec(dpShard=2, tp=8))
    assert all("schedulingGates" not in p["spec"] and "affinity" not in p["spec"] for p in unpinned.pods)


def test_embedding_sharding_group_comes_from_the_placement_unless_the_spec_sets_it() -> None:
    def group(kids: object) -> tuple[str, int]:
        config = json.loads(kids.config["data"]["config.json"])  # type: ignore[attr-defined]
        return env(kids.pods[0])["GEM_EMBEDDING_SHARDING_GROUP"], config["embeddingShardingGroup"]  # type: ignore[attr-defined]

    assert group(render_training(OWNER, spec(dpShard=4, tp=8))) == ("8", 8)  # unplaced: one host
    assert group(render_training(OWNER, spec(dpShard=4, tp=8), embedding_sharding_group=16)) == ("16", 16)
    pinned = spec(dpShard=4, tp=8).model_copy(update={"embedding_sharding_group": 32})
    assert group(render_training(OWNER, pinned, embedding_sharding_group=16)) == ("32", 32)


def _ckpt_spec(uri: str, secret: str | None = None) -> GEMTrainingSpec:
    checkpoint: dict[str, object] = {"uri": uri}
    if secret:
        checkpoint["credentialsSecretRef"] = {"name": secret}
    return GEMTrainingSpec.model_validate({"parallelism": {"dpShard": 2, "tp": 8}, "checkpoint": checkpoint})


def _restore_init(pod: dict[str, object]) -> dict[str, object] | None:
    inits = pod["spec"].get("initContainers", [])  # type: ignore[attr-defined]
    found = [c for c in inits if c["name"] == "checkpoint-restore"]
    return found[0] if found else None


def test_object_store_resume_pulls_the_checkpoint_with_the_loader_first() -> None:
    peers = ("http://gem-model-cache.gem-system:8470",)
    s = _ckpt_spec("s3://ckpt/job/", secret="ckpt-creds")
    kids = render_training(OWNER, s, resume_from="step-000400", peers=peers)
    for pod in kids.pods:
        init = _restore_init(pod)
        assert init is not None
        assert init["command"] == ["gem-load"]
        args = init["args"]
        assert args[:3] == ["pull", "s3://ckpt/job/step-000400", "/gem/restore/step-000400"]
        assert args[args.index("--manifest") + 1] == "s3://ckpt/job/step-000400/manifest.json"
        assert args[args.index("--cache") + 1] == "/var/cache/gem-models"
        assert args[args.index("--peers") + 1] == peers[0]
        # credentials only through the Secret, for the loader and for the trainer that uploads
        trainer = pod["spec"]["containers"][0]
        assert init["envFrom"] == trainer["envFrom"] == [{"secretRef": {"name": "ckpt-creds"}}]
        e = env(pod)
        assert e["GEM_RESTORE_DIR"] == "/gem/restore/step-000400" and e["GEM_RESUME_FROM"] == "step-000400"
        assert e["GEM_CHECKPOINT_STAGING"].startswith("/gem/")
        # the loader writes where the trainer reads: one emptyDir mounted by both
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        shared = {m["name"] for m in init["volumeMounts"]} & {m["name"] for m in trainer["volumeMounts"]}
        assert [n for n in shared if "emptyDir" in volumes[n]] == ["checkpoint-scratch"]
        assert volumes["node-cache"]["hostPath"]["path"] == "/var/cache/gem-models"
        text = json.dumps(pod)
        assert "AWS_SECRET_ACCESS_KEY" not in text and "AWS_ACCESS_KEY_ID" not in text
    no_peers = render_training(OWNER, s, resume_from="step-000400").pods[0]
    assert "--peers" not in _restore_init(no_peers)["args"]  # type: ignore[index]
    no_secret = render_training(OWNER, _ckpt_spec("gs://ckpt/job"), resume_from="step-000400").pods[0]
    assert "envFrom" not in _restore_init(no_secret)  # type: ignore[operator]
    assert "envFrom" not in no_secret["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("uri", "resume_from"),
    [
        ("s3://ckpt/job", None),
        ("s3://ckpt/job", ""),
        ("s3://ckpt/job", "../../etc"),
        ("/mnt/ckpt", "step-000400"),
        ("file:///mnt/ckpt", "step-000400"),
    ],
)
def test_no_restore_init_container_without_an_object_store_resume_point(uri: str, resume_from: str | None) -> None:
    pod = render_training(OWNER, _ckpt_spec(uri), resume_from=resume_from, peers=("http://p:8470",)).pods[0]
    assert _restore_init(pod) is None and "initContainers" not in pod["spec"]
    assert "GEM_RESTORE_DIR" not in env(pod)
    names = {v["name"] for v in pod["spec"]["volumes"]}
    assert "node-cache" not in names
    assert ("checkpoint-scratch" in names) == uri.startswith("s3://")


def test_a_newer_resume_point_does_not_change_the_pod_hash() -> None:
    s = _ckpt_spec("s3://ckpt/job", secret="ckpt-creds")

    def digest(resume_from: str | None) -> str:
        return str(
            render_training(OWNER, s, resume_from=resume_from).pods[0]["metadata"]["annotations"]["gem.dev/spec-hash"]
        )

    assert digest(None) == digest("step-000400") == digest("step-000800")
    assert digest(None) != str(
        render_training(OWNER, _ckpt_spec("s3://ckpt/job")).pods[0]["metadata"]["annotations"]["gem.dev/spec-hash"]
    )
