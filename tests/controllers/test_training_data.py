"""spec.training.data: the API's checks, and how the block reaches the trainer (args, ConfigMap, credentials)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from pydantic import ValidationError

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.controllers import gang, training
from gem_operator.controllers.reconcile import Outcome, PassContext
from gem_operator.controllers.status import StatusDraft
from gem_operator.render.common import Owner
from gem_operator.render.training import DATA_SPEC_KEY, render_training

OWNER = Owner("gem.dev/v1alpha1", "GEMTraining", "job", "ml", "uid-1")
FEED = {
    "name": "feed",
    "uri": "s3://logs/feed",
    "credentialsSecretRef": {"name": "logs-reader"},
    "timestamp": "ts",
    "sparse": ["ad_id"],
    "labels": {"ctr": "clicked", "cvr": "converted"},
}
BUYS = {"name": "purchases", "uri": "gs://events/purchases", "features": ["ad_id", "account_id"]}


def spec(data: Any) -> GEMTrainingSpec:
    return GEMTrainingSpec.model_validate(
        {"parallelism": {"dpShard": 2}, "gpusPerNode": 1, "checkpoint": {"uri": "/ckpt"}, "training": {"data": data}}
    )


def test_builtin_datasets_keep_their_arguments() -> None:
    for data, name in (({}, "synthetic"), ({"builtin": "movielens"}, "movielens")):
        kids = render_training(OWNER, spec(data))
        args = kids.pods[0]["spec"]["containers"][0]["args"]
        assert args[args.index("--data") + 1] == name and "--data-spec" not in args
        assert DATA_SPEC_KEY not in kids.config["data"]


def test_sources_are_rendered_as_a_data_spec_with_prefixed_credentials() -> None:
    kids = render_training(OWNER, spec({"sources": [FEED], "sequences": [BUYS]}))
    container = kids.pods[0]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--data-spec") + 1] == f"/etc/gem/{DATA_SPEC_KEY}" and "--data" not in args
    block = json.loads(kids.config["data"][DATA_SPEC_KEY])
    assert block["sources"][0]["labels"] == {"ctr": "clicked", "cvr": "converted"}
    assert "credentialsSecretRef" not in block["sources"][0] and block["sequences"][0]["features"] == [
        "ad_id",
        "account_id",
    ]
    assert container["envFrom"] == [{"prefix": "GEM_DATA_FEED_", "secretRef": {"name": "logs-reader"}}]
    assert json.loads(kids.config["data"]["config.json"])["data"] == "sources"


def test_a_timestamp_unit_reaches_the_trainer_and_auto_leaves_the_block_as_it_was() -> None:
    kids = render_training(OWNER, spec({"sources": [{**FEED, "timestampUnit": "ms"}], "sequences": [BUYS]}))
    block = json.loads(kids.config["data"][DATA_SPEC_KEY])
    assert block["sources"][0]["timestampUnit"] == "ms" and "timestampUnit" not in block["sequences"][0]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"builtin": "synthetic", "sources": [FEED]}, "not both"),
        ({"sequences": [BUYS]}, "needs training.data.sources"),
        ({"sources": [FEED, FEED]}, "unique"),
        ({"sources": [{**FEED, "labels": {}}]}, "labels"),
        ({"sources": [{**FEED, "domain": "surface"}]}, "domains"),
        ({"sources": [{**FEED, "sparse": []}]}, "sparse"),
        ({"sources": [{**FEED, "uri": "ftp://x"}]}, "uri"),
        ({"sources": [{**FEED, "timestampUnit": "minutes"}]}, "timestampUnit"),
        ("synthetic", "data"),
    ],
)
def test_bad_blocks_are_rejected_naming_the_field(data: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(data)


def _terminated(message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "job-worker-0",
            "namespace": "ml",
            "labels": {"gem.dev/node-rank": "0", "gem.dev/role": "worker"},
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 3, "message": message}}}],
        },
    }


def test_the_trainers_invalid_data_message_is_read_and_ends_the_run() -> None:
    said = json.dumps(
        {"reason": "InvalidData", "message": "data source 'feed': column 'clicked' is missing in f.parquet"}
    )
    assert (
        gang.invalid_data([_terminated(said)])
        == "pod job-worker-0: data source 'feed': column 'clicked' is missing in f.parquet"
    )
    unreachable = json.dumps(
        {"reason": "DataUnavailable", "message": "data source 'feed' at s3://logs/feed: unreachable"}
    )
    assert gang.invalid_data([_terminated(unreachable)]) is None  # retried by restarting, like any failure
    failure = gang.detect_failure([_terminated(unreachable)], {}, {"job-worker-0": 0})
    assert failure is not None and "DataUnavailable: data source 'feed'" in failure.message


class _Api:
    """The few calls a pass makes before it reads the pods (no nodes, no Kueue)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.events: list[Any] = []

    async def list(
        self, api_version: str, kind: str, namespace: str | None, labels: Any = None
    ) -> list[dict[str, Any]]:
        return self.pods if kind == "Pod" else []

    async def get(self, *args: Any) -> None:
        return None


async def test_invalid_data_sets_ready_false_and_fails_the_run() -> None:
    said = json.dumps({"reason": "InvalidData", "message": "data source 'feed': column 'clicked' is missing"})
    doc = {
        "apiVersion": "gem.dev/v1alpha1",
        "kind": "GEMTraining",
        "metadata": {"name": "job", "namespace": "ml", "uid": "uid-1", "generation": 1},
        "spec": {"parallelism": {"dpShard": 2}, "gpusPerNode": 1, "checkpoint": {"uri": "/ckpt"}},
    }
    from datetime import UTC, datetime

    now = datetime(2026, 12, 2, tzinfo=UTC)
    outcome = Outcome(draft=StatusDraft.from_status({}, now, 1))
    ctx = PassContext(kube=_Api([_terminated(said)]), body=doc, now=now, logger=logging.getLogger("t"))  # type: ignore[arg-type]
    await training.TrainingPass(ctx, GEMTrainingSpec.model_validate(doc["spec"]), outcome).run()
    ready = next(c for c in outcome.draft.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "InvalidData") and "column 'clicked'" in ready.message
    assert outcome.draft.fields["phase"] == "Failed"
