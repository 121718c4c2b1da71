"""Runs a local control plane until interrupted: `python -m gem_testbed.controlplane FLEET.yaml`.

FLEET.yaml holds Node manifests (a `kind: List` or a YAML list), e.g. the fleets the embedded
cluster uses. Prints the admin kubeconfig's path once the nodes are Ready; Ctrl-C stops everything
and removes the state (unless --keep-state).
"""

from __future__ import annotations

import argparse
import pathlib
import signal
import sys
import time
from typing import Any

import yaml

from gem_testbed.controlplane.binaries import MissingBinaryError
from gem_testbed.controlplane.launcher import ControlPlane
from gem_testbed.controlplane.processes import ControlPlaneError


def read_nodes(path: pathlib.Path) -> list[dict[str, Any]]:
    """Node manifests from a `kind: List` document or a plain YAML list."""
    document = yaml.safe_load(path.read_text())
    items = document.get("items", []) if isinstance(document, dict) else document
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"{path}: expected a kind: List of Nodes or a YAML list of Nodes")
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gem_testbed.controlplane", description=__doc__)
    parser.add_argument("fleet", type=pathlib.Path, help="YAML file of Node manifests")
    parser.add_argument("--port", type=int, default=None, help="kube-apiserver port (default: a free one)")
    parser.add_argument("--pod-step-delay-ms", type=int, default=200)
    parser.add_argument("--keep-state", action="store_true", help="keep certificates, data and logs on exit")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        plane = ControlPlane(
            read_nodes(args.fleet),
            apiserver_port=args.port,
            pod_step_delay_ms=args.pod_step_delay_ms,
            keep_state=args.keep_state,
        )
        with plane:
            print(f"ready: export KUBECONFIG={plane.kubeconfig}  (logs: {plane.state_dir / 'logs'})", flush=True)
            while True:
                time.sleep(3600)
    except (MissingBinaryError, ControlPlaneError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
