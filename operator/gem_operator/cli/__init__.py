"""`gemop`: run the operator, generate CRDs, run the demo, serve the embedded cluster."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gem_operator import __version__

DEFAULT_CRD_DIR = Path(__file__).resolve().parents[3] / "crds"


def _cmd_crds(args: argparse.Namespace) -> int:
    from gem_operator.api.crd import all_crds, render_yaml

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    drifted = []
    for filename, crd in all_crds().items():
        path = out / filename
        text = render_yaml(crd)
        if args.check:
            if not path.exists() or path.read_text() != text:
                drifted.append(str(path))
            continue
        path.write_text(text)
        print(f"wrote {path}")
    if drifted:
        print(
            "CRDs drifted from gem_operator/api; run `gemop crds`:\n  " + "\n  ".join(drifted),
            file=sys.stderr,
        )
        return 1
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    import yaml

    from gem_operator.api.schema_check import validate_manifest

    failed = 0
    for path in args.files:
        try:
            docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
        except (OSError, yaml.YAMLError) as exc:
            print(f"{path}: cannot read: {exc}", file=sys.stderr)
            failed += 1
            continue
        for doc in docs:
            name = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
            errors = validate_manifest(doc)
            for error in errors:
                print(f"{path}: {name}: {error}", file=sys.stderr)
            failed += bool(errors)
            if not errors:
                print(f"{path}: {name}: valid")
    return 1 if failed else 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    import yaml

    from gem_operator.api.kinds import GEM_TRAINING
    from gem_operator.api.training import GEMTrainingSpec
    from gem_operator.api.validation import InvalidSpec, parse_spec
    from gem_operator.topology import Infeasible, cluster_view_from_objects, explain_plan, plan_gang

    def load(path: Path) -> list[dict[str, object]]:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        items: list[dict[str, object]] = []
        for doc in docs:
            items.extend(doc.get("items", []) if doc.get("kind", "").endswith("List") else [doc])
        return items

    try:
        job = yaml.safe_load(Path(args.job).read_text())
        if args.nodes:
            nodes = load(Path(args.nodes))
        else:
            from gem_operator.sim.fleet import load_fleet

            nodes = [dict(n) for n in load_fleet(args.fleet)]
        pods = load(Path(args.pods)) if args.pods else []
    except (OSError, yaml.YAMLError, ValueError) as exc:
        print(f"gemop plan: {exc}", file=sys.stderr)
        return 2
    exclude = {n for n in (args.exclude or "").split(",") if n}
    body = dict(job) if isinstance(job, dict) and "spec" in job else {"spec": job}
    body.setdefault("kind", "GEMTraining")
    body.setdefault("metadata", {"name": "what-if"})
    try:
        spec = parse_spec(GEM_TRAINING, body)
    except InvalidSpec as invalid:
        print("gemop plan: invalid GEMTraining:\n  " + "\n  ".join(invalid.problems), file=sys.stderr)
        return 2
    assert isinstance(spec, GEMTrainingSpec)
    result = plan_gang(spec, cluster_view_from_objects(nodes, pods), exclude_nodes=exclude)
    if args.output == "json":
        print(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        print(explain_plan(result))
    return 1 if isinstance(result, Infeasible) else 0


def _cmd_run(args: argparse.Namespace) -> int:
    from gem_operator.cli.operator import OperatorOptions, run_foreground

    if not args.namespace and not args.all_namespaces:
        print("gemop run: pass --namespace NS (repeatable) or --all-namespaces", file=sys.stderr)
        return 2
    if args.metrics_port:
        import os

        os.environ["GEM_METRICS_PORT"] = str(args.metrics_port)
    run_foreground(
        OperatorOptions(
            namespaces=args.namespace or (),
            clusterwide=args.all_namespaces,
            standalone=args.standalone,
            peering_name=None if args.standalone else args.peering,
            liveness_endpoint=args.liveness,
        )
    )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import os

    # Status follows children on each resync (read when the handlers are imported): keep it brisk.
    os.environ.setdefault("GEM_RESYNC_SECONDS", "2")
    from gem_operator.cli.demo import SAMPLES_DIR, run_demo

    return run_demo(
        fleet=args.fleet,
        samples=args.samples or SAMPLES_DIR,
        timeout=args.timeout,
        replay_seconds=args.replay_seconds,
        plot=args.plot,
    )


def _cmd_sim_up(args: argparse.Namespace) -> int:
    import os
    import signal
    import threading

    from gem_operator.api.crd import gem_crds
    from gem_operator.cli.demo import PEERING_NAME, peering_object
    from gem_operator.cli.operator import OperatorOptions, OperatorThread
    from gem_operator.sim.cluster import EmbeddedCluster

    run_pods = None
    if args.run_pods or args.origin:
        from gem_operator.sim.processes import ProcessConfig

        origins = dict(o.split("=", 1) for o in args.origin or [] if "=" in o)
        if len(origins) != len(args.origin or []) or not args.run_pods or args.max_pod_processes < 1:
            print(
                "gemop sim up: --origin URI=PATH (e.g. s3://gem-models/ranker/v42=/srv/models/v42) and "
                "--max-pod-processes N >= 1 go with --run-pods",
                file=sys.stderr,
            )
            return 2
        run_pods = ProcessConfig(max_processes=args.max_pod_processes, origins=origins)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    crds = list(gem_crds().values())
    with EmbeddedCluster(args.fleet, crds, host=args.host, port=args.port, run_pods=run_pods) as cluster:
        kubeconfig = cluster.write_kubeconfig(args.kubeconfig)
        cluster.apply(peering_object(PEERING_NAME, "default"))
        print(f"embedded cluster serving at {cluster.url}; kubeconfig: {kubeconfig}", flush=True)
        if cluster.network is not None:
            print(f"  pods run as processes; Prometheus file_sd targets in {cluster.network.sd_dir}", flush=True)
        print(f"  kubectl --kubeconfig {kubeconfig} apply --validate=false -f crds/samples/", flush=True)
        operator = None
        if args.operator:
            os.environ["KUBECONFIG"] = str(kubeconfig)
            operator = OperatorThread(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
            operator.start()
            print("operator running in this process", flush=True)
        stop.wait()
        if operator is not None:
            operator.stop()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gemop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator against the current kubeconfig (like `kopf run`)")
    run.add_argument("-n", "--namespace", action="append", help="namespace to serve (repeatable)")
    run.add_argument("-A", "--all-namespaces", action="store_true", help="serve the whole cluster")
    run.add_argument("--standalone", action="store_true", help="no peering (only one replica may run)")
    run.add_argument("--peering", default="gem-operator", help="kopf peering object name")
    run.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL")
    run.add_argument("--metrics-port", type=int, default=9090, help="port of /metrics (0 disables)")
    run.set_defaults(func=_cmd_run)

    crds = sub.add_parser("crds", help="write CRD YAML generated from the API types")
    crds.add_argument("--out", type=Path, default=DEFAULT_CRD_DIR, help="output directory (default: crds/)")
    crds.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    crds.set_defaults(func=_cmd_crds)

    validate = sub.add_parser("validate", help="check manifests against the CRDs and the operator's rules")
    validate.add_argument("files", nargs="+", help="YAML files with GEMTraining/RankingService/SolarisPrecompute")
    validate.set_defaults(func=_cmd_validate)

    plan = sub.add_parser("plan", help="what-if: place a GEMTraining on a nodes file (or a sim fleet)")
    plan.add_argument("job", help="GEMTraining manifest (YAML)")
    plan.add_argument("--nodes", help="Nodes as `kubectl get nodes -o yaml` writes them")
    plan.add_argument("--pods", help="Pods already bound (`kubectl get pods -A -o yaml`), to count used GPUs")
    plan.add_argument("--fleet", default="large", help="simulated fleet when --nodes is not given")
    plan.add_argument("--exclude", help="comma-separated nodes to avoid")
    plan.add_argument("--output", choices=("table", "json"), default="table")
    plan.set_defaults(func=_cmd_plan)

    demo = sub.add_parser("demo", help="embedded cluster + operator + samples, then a summary")
    demo.add_argument("--fleet", default="demo", help="fleet name (demo, large) or a YAML file of Nodes")
    demo.add_argument("--samples", type=Path, default=None, help="directory of sample resources")
    demo.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for resources to settle")
    demo.add_argument("--replay-seconds", type=int, default=40, help="length of the autoscaling replay (0 skips it)")
    demo.add_argument("--plot", type=Path, default=None, help="write the scaling timeline as a PNG")
    demo.set_defaults(func=_cmd_demo)

    sim = sub.add_parser("sim", help="the embedded cluster")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    up = sim_sub.add_parser("up", help="serve the embedded cluster until interrupted")
    up.add_argument("--fleet", default="demo", help="fleet name (demo, large) or a YAML file of Nodes")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=0, help="port (0 picks a free one)")
    up.add_argument("--kubeconfig", type=Path, default=Path("gem-sim.kubeconfig"), help="where to write it")
    up.add_argument("--operator", action="store_true", help="also run the operator in this process")
    up.add_argument(
        "--run-pods",
        action="store_true",
        help="run RankingService/SolarisPrecompute pods as local processes (process kubelet, Service fronts, "
        "node dcgm-exporters, Prometheus file_sd)",
    )
    up.add_argument("--origin", action="append", help="with --run-pods: URI=PATH, pull URI's bytes from PATH")
    up.add_argument("--max-pod-processes", type=int, default=16, help="with --run-pods: most pods run at once")
    up.set_defaults(func=_cmd_sim_up)

    sub.add_parser(
        "replay",
        help="replay a traffic trace against the autoscaling policy and baselines (see `gemop replay --help`)",
        add_help=False,
    )

    from gem_operator.cli.loadtest import add_parser as add_loadtest

    add_loadtest(sub)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=lambda _a: print(f"gemop {__version__}") or 0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["replay"]:
        # The replay command owns its flags (gem_operator.autoscaling.replay).
        from gem_operator.autoscaling.replay import main as replay_main

        return replay_main(argv[1:])
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
