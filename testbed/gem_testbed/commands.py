"""The `gemop` subcommands the testbed adds: `demo`, `sim up` and `loadtest`.

`gem_operator.cli` never imports this module: it loads each `add_*` function through the entry
points of group `gemop.commands` (pyproject.toml), so the operator runs without the testbed
installed, and these commands appear once the `testbed` extra is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gem_common.argtypes import non_negative_int, positive_float, positive_int
from gem_testbed.drivers.loadtest import add_parser as add_loadtest

# `sub` is what `ArgumentParser.add_subparsers()` returns (argparse types it privately).
SubParsers = Any


def add_demo(sub: SubParsers) -> None:
    """`gemop demo`: embedded cluster + operator + samples, then a summary."""
    demo = sub.add_parser("demo", help="embedded cluster + operator + samples, then a summary")
    demo.add_argument("--fleet", default="demo", help="fleet name (demo, large) or a YAML file of Nodes")
    demo.add_argument("--samples", type=Path, default=None, help="directory of sample resources")
    demo.add_argument("--timeout", type=positive_float, default=90.0, help="seconds to wait for resources to settle")
    demo.add_argument(
        "--replay-seconds", type=non_negative_int, default=40, help="length of the autoscaling replay (0 skips it)"
    )
    demo.add_argument("--plot", type=Path, default=None, help="write the scaling timeline as a PNG")
    demo.add_argument(
        "--scale-mode",
        choices=("independent", "duplicate"),
        default="independent",
        help="how the trace is scaled to the demo's load (as `gemop replay --scale-mode`)",
    )
    demo.set_defaults(func=_cmd_demo)


def add_sim(sub: SubParsers) -> None:
    """`gemop sim up`: serve the embedded cluster until interrupted."""
    sim = sub.add_parser("sim", help="the embedded cluster")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    up = sim_sub.add_parser("up", help="serve the embedded cluster until interrupted")
    up.add_argument("--fleet", default="demo", help="fleet name (demo, large) or a YAML file of Nodes")
    up.add_argument(
        "--control-plane",
        choices=("embedded", "real"),
        default="embedded",
        help="embedded: the API emulator in this process; real: etcd, kube-apiserver, controller manager, "
        "scheduler and KWOK nodes from the binaries scripts/control-plane/build.sh builds",
    )
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=0, help="port (0 picks a free one)")
    up.add_argument("--kubeconfig", type=Path, default=Path("gem-sim.kubeconfig"), help="where to write it")
    up.add_argument(
        "--operator",
        action="store_true",
        help="also run the operator (real: CRDs, helm install of the chart, the operator with its ServiceAccount)",
    )
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
    up.add_argument("--max-pod-processes", type=positive_int, default=16, help="with --run-pods: most pods run at once")
    up.set_defaults(func=_cmd_sim_up)


def _cmd_demo(args: argparse.Namespace) -> int:
    import os

    # Status follows children on each resync (read when the handlers are imported): keep it brisk.
    os.environ.setdefault("GEM_RESYNC_SECONDS", "2")
    from gem_operator.cli.plan import output_problem
    from gem_testbed.drivers.demo import SAMPLES_DIR, run_demo

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
    from gem_operator.cli.operator import OperatorOptions, OperatorThread
    from gem_operator.cli.paths import samples_dir
    from gem_operator.cli.plan import output_problem, port_problem
    from gem_operator.fleet import FleetError, load_fleet
    from gem_testbed.cluster import EmbeddedCluster
    from gem_testbed.drivers.demo import PEERING_NAME, peering_object

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
    if args.control_plane == "real":
        return _sim_up_real(args, fleet)
    run_pods = None
    if args.run_pods or args.origin:
        from gem_testbed.kubelets.processes import ProcessConfig

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


def _sim_up_real(args: argparse.Namespace, fleet: list[Any]) -> int:
    import signal
    import threading

    from gem_testbed.controlplane.serve import serve

    unsupported = [
        flag
        for flag, used in (
            ("--token-file", args.token_file),
            ("--run-pods", args.run_pods or args.origin),
            ("--host", args.host != "127.0.0.1"),
        )
        if used
    ]
    if unsupported:
        print(
            f"gemop sim up: {', '.join(unsupported)} go with the embedded control plane; "
            "--control-plane real serves on 127.0.0.1 with client certificates and KWOK pods",
            file=sys.stderr,
        )
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    def say(line: str) -> None:
        # Problems (one line each) go to stderr, named after the command, like the flag checks above.
        problem = line.startswith(("error:", "forbidden:"))
        print(f"gemop sim up: {line}" if problem else line, file=sys.stderr if problem else sys.stdout, flush=True)

    return serve(fleet, kubeconfig=args.kubeconfig, stop=stop, port=args.port or None, operator=args.operator, say=say)


__all__ = ["add_demo", "add_loadtest", "add_sim"]
