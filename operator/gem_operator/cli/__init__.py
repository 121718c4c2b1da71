"""`gemop`: run the operator, generate CRDs, validate, plan; the testbed extra adds the demo and the sim cluster."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gem_common.argtypes import tcp_port
from gem_operator import __version__
from gem_operator.envvars import EnvSettingError


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
    from gem_operator.controllers import REGISTRY  # noqa: F401  (a bad GEM_* variable stops here: see main)
    from gem_operator.kube.auth import config_problem

    problem = config_problem()
    if problem:
        print(f"gemop run: {problem}", file=sys.stderr)
        return 2

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


# What the testbed extra adds (gem_testbed.commands, entry point group `gemop.commands`). Without
# it they still show in `gemop --help`, and running one says what to install.
TESTBED_COMMANDS = {
    "demo": "embedded cluster + operator + samples, then a summary",
    "sim": "the embedded cluster (`gemop sim up`)",
    "loadtest": "real servers, Prometheus and operator under a replayed trace (one machine)",
}


def _add_extra_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser], load: bool = True) -> None:
    """Subcommands other distributions declare; a placeholder for each testbed one not installed.

    With `load=False` every one is a placeholder: a built-in command (`gemop plan`) then does not
    import the testbed, which costs seconds before the command itself starts.
    """
    from gem_operator import plugins

    for name in [*TESTBED_COMMANDS, *sorted(plugins.declared(plugins.COMMANDS).keys() - TESTBED_COMMANDS.keys())]:
        if not load:
            sub.add_parser(name, help=TESTBED_COMMANDS.get(name, "added by an installed distribution"), add_help=False)
            continue
        add, missing = plugins.load(plugins.COMMANDS, name)
        if add is not None:
            add(sub)
        elif name in TESTBED_COMMANDS:
            help_text = f"{TESTBED_COMMANDS[name]} (needs the testbed extra)"
            sub.add_parser(name, help=help_text, add_help=False).set_defaults(func=lambda _a, m=missing: _missing(m))


def _missing(why: str | None) -> int:
    print(f"gemop: {why}", file=sys.stderr)
    return 2


# Commands of this package: parsing their arguments needs no other distribution's subcommands.
BUILTIN_COMMANDS = frozenset({"run", "crds", "validate", "plan", "version"})


def build_parser(load_extras: bool = True) -> argparse.ArgumentParser:
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
    run.add_argument("--metrics-port", type=tcp_port, default=9090, help="port of /metrics (0 disables)")
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
    plan.add_argument(
        "--nodes", help="Nodes (and bound Pods) as `kubectl get nodes,pods -A -o json` (or -o yaml) writes them"
    )
    plan.add_argument("--pods", help="more bound Pods (`kubectl get pods -A -o json`), to count used GPUs")
    plan.add_argument("--fleet", default="large", help="simulated fleet when --nodes is not given")
    plan.add_argument("--exclude", help="comma-separated nodes to avoid")
    plan.add_argument("--output", choices=("table", "json"), default="table")
    plan.set_defaults(func=_cmd_plan)

    sub.add_parser(
        "replay",
        help="replay a traffic trace against the autoscaling policy and baselines (see `gemop replay --help`)",
        add_help=False,
    )

    _add_extra_commands(sub, load_extras)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=lambda _a: print(f"gemop {__version__}") or 0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["replay"]:
        # The replay command owns its flags (gem_operator.replay.command).
        from gem_operator.replay.command import main as replay_main

        return replay_main(argv[1:])
    if argv[:1] and argv[0] in TESTBED_COMMANDS:
        # Checked before parsing: without the extra there are no flags to parse.
        from gem_operator import plugins

        add, missing = plugins.load(plugins.COMMANDS, argv[0])
        if add is None:
            print(f"gemop {argv[0]}: {missing}", file=sys.stderr)
            return 2
    args = build_parser(load_extras=not argv or argv[0] not in BUILTIN_COMMANDS).parse_args(argv)
    try:
        return int(args.func(args))
    except EnvSettingError as exc:  # run, demo and sim load the handlers, which read these as they load
        print(f"gemop {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
