"""`gemop plan`: what-if placement of a GEMTraining on a nodes file or a simulated fleet.

Bad input gives one line naming the file and the fix (exit 2), never a traceback. The command
says which nodes it planned on (file or simulated fleet) and warns when none of them carries a
topology label beyond the host, since the plan then cannot tell NVLink domains or racks apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from gem_common.yamldocs import FAST_LOADER, load_documents

GEM_API = "gem.dev/v1alpha1"


class PlanInputError(ValueError):
    """A file `gemop plan` cannot use; the message names it and says what to do."""


# libyaml's parser when PyYAML was built with it: the pure-Python one takes seconds on a large export.


def _parse_documents(text: str, path: Path, what: str) -> list[Any]:
    """The documents of a JSON or YAML file.

    `kubectl get -o json` exports are parsed as JSON (json.loads, 100x faster than any YAML loader on
    a 10,000-node export); a file that does not start like JSON, or is not valid JSON, is read as YAML.
    """
    json_error: json.JSONDecodeError | None = None
    if text.lstrip()[:1] in ("{", "["):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            json_error = exc  # perhaps a YAML flow mapping; YAML decides
        except RecursionError:  # both parsers recurse per level: no manifest nests like this
            raise PlanInputError(f"{what} {path}: nested too deeply to be a Kubernetes object") from None
    try:
        return [d for d in load_documents(text, FAST_LOADER) if d is not None]
    except RecursionError:
        raise PlanInputError(f"{what} {path}: nested too deeply to be a Kubernetes object") from None
    except yaml.YAMLError as exc:
        if json_error is not None:
            raise PlanInputError(
                f"{what} {path}: not valid JSON (line {json_error.lineno}): {json_error.msg}"
            ) from None
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise PlanInputError(f"{what} {path}: not valid YAML{where}: {problem}") from None


def _read_yaml(path: Path, what: str) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanInputError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    return _parse_documents(text, path, what)


def _objects(path: Path, what: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for doc in _read_yaml(path, what):
        if isinstance(doc, list):  # a YAML/JSON list of objects
            items.extend(doc)
            continue
        if not isinstance(doc, dict):
            raise PlanInputError(f"{what} {path}: expected Kubernetes objects, found a {type(doc).__name__}")
        kind = str(doc.get("kind", ""))
        items.extend(doc.get("items") or [] if kind.endswith("List") else [doc])
    return [i for i in items if isinstance(i, dict)]


def load_job(path: Path) -> dict[str, Any]:
    docs = _read_yaml(path, "JOB")
    if not docs:
        raise PlanInputError(f"JOB {path}: empty file; pass a GEMTraining manifest")
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind", "GEMTraining") == "GEMTraining"]
    if not jobs:
        kinds = ", ".join(sorted({str(d.get("kind")) for d in docs if isinstance(d, dict)})) or "no objects"
        raise PlanInputError(f"JOB {path}: no GEMTraining in it (found {kinds}); plan places GEMTraining gangs")
    job = jobs[0]
    body = dict(job) if "spec" in job else {"spec": job}
    body.setdefault("apiVersion", GEM_API)
    body.setdefault("kind", "GEMTraining")
    body.setdefault("metadata", {"name": "what-if"})
    return body


def load_cluster(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Nodes and the Pods of one export (`kubectl get nodes,pods -A -o json` holds both)."""
    objs = _objects(path, "--nodes")
    nodes = [o for o in objs if o.get("kind", "Node") == "Node"]
    if not nodes:
        kinds = ", ".join(sorted({str(o.get("kind")) for o in objs})) or "nothing"
        raise PlanInputError(
            f"--nodes {path}: no Node objects in it (found {kinds}); export them with "
            "`kubectl get nodes,pods -A -o json` (or `kubectl get nodes -o yaml`)"
        )
    return nodes, [o for o in objs if o.get("kind") == "Pod"]


def load_nodes(path: Path) -> list[dict[str, Any]]:
    return load_cluster(path)[0]


def load_pods(path: Path) -> list[dict[str, Any]]:
    return [o for o in _objects(path, "--pods") if o.get("kind", "Pod") == "Pod"]


def topology_warning(nodes: list[dict[str, Any]], labels: list[str]) -> str | None:
    """A warning when no node carries any of the tiers' labels beyond the host."""
    if not labels:
        return None
    found = any(label in ((n.get("metadata") or {}).get("labels") or {}) for n in nodes for label in labels)
    if found:
        return None
    return (
        f"warning: none of the {len(nodes)} nodes carries a topology label ({', '.join(labels)}): the plan cannot "
        "tell NVLink domains, racks or blocks apart and scores every host alike; label the nodes, or set "
        "spec.topology.tiers to the labels your nodes have"
    )


_EXPORT_HINT = "export Nodes and Pods as the API server writes them (`kubectl get nodes,pods -A -o json`)"


def misshapen_object(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str:
    """Which object the cluster view cannot read: each Node alone, then each Pod beside the Nodes."""
    from gem_operator.topology import cluster_view_from_objects

    def name(obj: dict[str, Any], kind: str, index: int) -> str:
        meta = obj.get("metadata")
        named = meta.get("name") if isinstance(meta, dict) else None
        return f"{kind} {named!r}" if isinstance(named, str) and named else f"{kind} #{index + 1} in the file"

    for i, node in enumerate(nodes):
        try:
            cluster_view_from_objects([node], [])
        except (AttributeError, TypeError, ValueError):
            return f"--nodes: {name(node, 'Node', i)} is not shaped as a Node"
    for i, pod in enumerate(pods):
        try:
            cluster_view_from_objects(nodes, [pod])
        except (AttributeError, TypeError, ValueError):
            return f"--nodes/--pods: {name(pod, 'Pod', i)} is not shaped as a Pod"
    return "--nodes/--pods: the Nodes and Pods together cannot be read"


def cmd_plan(args: argparse.Namespace) -> int:
    from gem_operator.api.kinds import GEM_TRAINING
    from gem_operator.api.training import GEMTrainingSpec
    from gem_operator.api.validation import InvalidSpec, parse_spec
    from gem_operator.topology import Infeasible, cluster_view_from_objects, explain_plan, plan_gang
    from gem_operator.topology.tiers import CONVENTIONS

    try:
        body = load_job(Path(args.job))
        pods = load_pods(Path(args.pods)) if args.pods else []
        if args.nodes:
            nodes, exported_pods = load_cluster(Path(args.nodes))
            pods += exported_pods
            with_pods = f", {len(pods)} pods" if pods else ""
            source = f"nodes from {args.nodes} ({len(nodes)} nodes{with_pods})"
        else:
            from gem_operator.fleet import FleetError, load_fleet

            try:
                nodes = [dict(n) for n in load_fleet(args.fleet)]
            except FleetError as exc:
                raise PlanInputError(
                    f"--fleet {exc}; use a shipped fleet (demo, large), a Nodes YAML file, or --nodes FILE"
                ) from None
            source = f"simulated fleet {args.fleet!r} ({len(nodes)} nodes); pass --nodes FILE for your cluster"
    except PlanInputError as exc:
        print(f"gemop plan: {exc}", file=sys.stderr)
        return 2
    try:
        spec = parse_spec(GEM_TRAINING, body)
    except InvalidSpec as invalid:
        print("gemop plan: invalid GEMTraining:\n  " + "\n  ".join(invalid.problems), file=sys.stderr)
        return 2
    assert isinstance(spec, GEMTrainingSpec)
    # What it planned on, on stderr, so that `--output json` stays parseable.
    print(f"gemop plan: {source}", file=sys.stderr)
    if spec.topology.tiers:
        tier_labels = [t.label for t in spec.topology.tiers[1:]]
    else:  # discovery: any known convention counts; NVLink first, the tier the default rules lean on
        by_role = sorted(CONVENTIONS, key=lambda convention: convention[0] != "nvlink")
        tier_labels = [label for _, labels in by_role for label in labels]
    try:
        view = cluster_view_from_objects(nodes, pods)
    except (AttributeError, TypeError, ValueError) as exc:  # a hand-edited export: a label map that is a list
        print(f"gemop plan: {misshapen_object(nodes, pods)}: {exc}; {_EXPORT_HINT}", file=sys.stderr)
        return 2
    warning = topology_warning(nodes, tier_labels)
    if warning:
        print(f"gemop plan: {warning}", file=sys.stderr)
    exclude = {n for n in (args.exclude or "").split(",") if n}
    result = plan_gang(spec, view, exclude_nodes=exclude)
    if args.output == "json":
        print(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        print(explain_plan(result))
    return 1 if isinstance(result, Infeasible) else 0


def port_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be served (in use, not an address here), or None; port 0 is always fine."""
    import errno
    import socket

    if port == 0:
        return None
    if not 0 < port < 65536:
        return f"--port {port}: not a TCP port (1-65535, or 0 for a free one)"
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"--port {port}: {host}:{port} is in use (another `gemop sim up`?); "
                    "pick another, or 0 for a free one"
                )
            return f"--host {host} --port {port}: cannot listen there: {exc.strerror or exc}"
    return None


def output_problem(path: Path | str | None, flag: str) -> str | None:
    """Why a file cannot be written at `path` (its folder is missing or not a folder), or None."""
    if path is None:
        return None
    parent = Path(path).expanduser().resolve().parent
    if not parent.is_dir():
        return f"{flag} {path}: folder {parent} does not exist; create it or write the file elsewhere"
    return None
