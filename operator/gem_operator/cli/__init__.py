"""`gemop`: run the operator, generate CRDs, run the demo, serve the embedded cluster."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gem_operator import __version__


def _cmd_crds(args: argparse.Namespace) -> int:
    from gem_operator.cli.crds import run_crds

    return run_crds(args.out, args.check)


def _cmd_validate(args: argparse.Namespace) -> int:
    from gem_operator.cli.validate import run_validate

    return run_validate(args.files)


def _cmd_plan(args: argparse.Namespace) -> int:
    from gem_operator.cli.plan import cmd_plan

    return cmd_plan(args)


def _cmd_run(args: argparse.Namespace) -> int:
    import logging
    import os

    from gem_operator.cli.logs import configure_logging
    from gem_operator.cli.operator import OperatorOptions, default_priority, run_foreground

    if not args.namespace and not args.all_namespaces:
        print("gemop run: pass --namespace NS (repeatable) or --all-namespaces", file=sys.stderr)
        return 2
    if args.priority is not None and not 0 <= args.priority <= 2**31 - 1:
        print("gemop run: --priority must be between 0 and 2147483647", file=sys.stderr)
        return 2
    configure_logging(args.log_level, args.log_format)
    if args.metrics_port:
        os.environ["GEM_METRICS_PORT"] = str(args.metrics_port)
    priority = args.priority if args.priority is not None else default_priority()
    opts = OperatorOptions(
        namespaces=args.namespace or (),
        clusterwide=args.all_namespaces,
        standalone=args.standalone,
        peering_name=None if args.standalone else args.peering,
        liveness_endpoint=args.liveness,
        priority=priority,
    )
    from gem_operator.controllers.settings import PEERING_LIFETIME

    peering = (
        "standalone"
        if args.standalone
        else f"peering {args.peering} (priority {priority}, lifetime {PEERING_LIFETIME} s)"
    )
    logging.getLogger("gem_operator").info(
        "gem-operator %s starting: namespaces %s; %s; liveness %s",
        __version__,
        "all" if args.all_namespaces else ",".join(args.namespace),
        peering,
        args.liveness,
    )
    run_foreground(opts)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import os

    # Status follows children on each resync (read when the handlers are imported): keep it brisk.
    os.environ.setdefault("GEM_RESYNC_SECONDS", "2")
    from gem_operator.cli.demo import SAMPLES_DIR, run_demo
    from gem_operator.cli.plan import output_problem

    problem = output_problem(args.plot, "--plot")
    if problem:
        print(f"gemop demo: {problem}", file=sys.stderr)
        return 2

    return run_demo(
        fleet=args.fleet,
        samples=args.samples or SAMPLES_DIR,
        timeout=args.timeout,
        replay_seconds=args.replay_seconds,
        plot=args.plot,
        scale_mode=args.scale_mode,
    )


def _cmd_sim_up(args: argparse.Namespace) -> int:
    import os
    import signal
    import threading

    from gem_operator.api.crd import gem_crds
    from gem_operator.cli.demo import PEERING_NAME, peering_object
    from gem_operator.cli.operator import OperatorOptions, OperatorThread
    from gem_operator.cli.paths import samples_dir
    from gem_operator.cli.plan import output_problem, port_problem
    from gem_operator.sim.cluster import EmbeddedCluster
    from gem_operator.sim.fleet import FleetError, load_fleet

    # Bad input is one line naming the flag, before anything starts.
    try:
        fleet = load_fleet(args.fleet)
    except FleetError as exc:
        print(f"gemop sim up: --fleet {exc}; use a shipped fleet (demo, large) or a Nodes YAML file", file=sys.stderr)
        return 2
    problem = port_problem(args.host, args.port) or output_problem(args.kubeconfig, "--kubeconfig")
    if problem:
        print(f"gemop sim up: {problem}", file=sys.stderr)
        return 2
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
    token = None
    if args.token_file:
        try:
            token = args.token_file.read_text().strip()
        except OSError as exc:
            print(f"gemop sim up: --token-file: {exc}", file=sys.stderr)
            return 2
        if not token:
            print(f"gemop sim up: --token-file {args.token_file} is empty; put the bearer token in it", file=sys.stderr)
            return 2
    embedded = EmbeddedCluster(
        fleet, list(gem_crds().values()), host=args.host, port=args.port, token=token, run_pods=run_pods
    )
    try:
        cluster = embedded.__enter__()
    except (OSError, RuntimeError) as exc:
        print(f"gemop sim up: the embedded cluster did not start: {exc.__cause__ or exc}", file=sys.stderr)
        return 1
    try:
        kubeconfig = cluster.write_kubeconfig(args.kubeconfig)
        cluster.apply(peering_object(PEERING_NAME, "default"))
        print(f"embedded cluster serving at {cluster.url}; kubeconfig: {kubeconfig}", flush=True)
        if cluster.network is not None:
            print(f"  pods run as processes; Prometheus file_sd targets in {cluster.network.sd_dir}", flush=True)
        print(f"  kubectl --kubeconfig {kubeconfig} apply --validate=false -f {samples_dir()}/", flush=True)
        operator = None
        if args.operator:
            os.environ["KUBECONFIG"] = str(kubeconfig)
            operator = OperatorThread(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
            operator.start()
            print("operator running in this process", flush=True)
        stop.wait()
        if operator is not None:
            operator.stop()
    finally:
        embedded.__exit__(None, None, None)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gemop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator against the current kubeconfig (like `kopf run`)")
    run.add_argument("-n", "--namespace", action="append", help="namespace to serve (repeatable)")
    run.add_argument("-A", "--all-namespaces", action="store_true", help="serve the whole cluster")
    run.add_argument("--standalone", action="store_true", help="no peering (only one replica may run)")
    run.add_argument("--peering", default="gem-operator", help="kopf peering object name")
    run.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority; the highest live replica acts (default: distinct per replica, from "
        "$GEM_POD_UID or random, since equal priorities pause every replica)",
    )
    run.add_argument("--log-level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    run.add_argument("--log-format", default="text", choices=("text", "json"), help="stderr lines as text or JSON")
    run.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL")
    run.add_argument("--metrics-port", type=int, default=9090, help="port of /metrics (0 disables)")
    run.set_defaults(func=_cmd_run)

    crds = sub.add_parser("crds", help="write CRD YAML generated from the API types")
    crds.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: crds/ of the checkout; outside one, print them on stdout)",
    )
    crds.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    crds.set_defaults(func=_cmd_crds)

    validate = sub.add_parser("validate", help="check manifests against the CRDs and the operator's rules")
    validate.add_argument(
        "files", nargs="+", help="YAML/JSON files or directories (multi-document, kind: List; - for stdin)"
    )
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
    demo.add_argument(
        "--scale-mode",
        choices=("independent", "duplicate"),
        default="independent",
        help="how the trace is scaled to the demo's load (as `gemop replay --scale-mode`)",
    )
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
        "--token-file", type=Path, help="require the bearer token in this file on every request (401 otherwise)"
    )
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
