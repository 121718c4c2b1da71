"""`gemop sim up --control-plane real`: a real control plane serving a fleet until interrupted.

Starts etcd, kube-apiserver, the controller manager, the scheduler and KWOK playing the fleet's GPU
nodes; with `operator=True` also installs the CRDs and the chart and runs the operator with the
chart's ServiceAccount token (`operator.py`). The kubeconfig written for the user embeds its
certificates, so it works from anywhere while the cluster runs. Stopping (the `stop` event, set by
Ctrl-C) stops every process and removes the state; the operator's 403s, if any, are reported then.
"""

from __future__ import annotations

import base64
import pathlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from gem_testbed.controlplane.binaries import MissingBinaryError
from gem_testbed.controlplane.kwok import FAIL_ANNOTATION
from gem_testbed.controlplane.launcher import ControlPlane
from gem_testbed.controlplane.operator import OperatorProcess, forbidden_requests, install_operator
from gem_testbed.controlplane.processes import ControlPlaneError

Say = Callable[[str], None]


def write_portable_kubeconfig(source: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """A copy of `source` with its certificate files inlined (`*-data`), private to the user."""
    config = yaml.safe_load(source.read_text())
    inline = {"certificate-authority", "client-certificate", "client-key"}
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in config.get(section, []):
            fields = entry[key]
            for name in inline & fields.keys():
                fields[f"{name}-data"] = base64.b64encode(pathlib.Path(fields.pop(name)).read_bytes()).decode()
    target.touch(mode=0o600, exist_ok=True)
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    return target.resolve()


def serve(
    fleet: Sequence[Mapping[str, Any]],
    *,
    kubeconfig: pathlib.Path,
    stop: threading.Event,
    port: int | None = None,
    operator: bool = False,
    watched: Sequence[str] = ("default",),
    say: Say = print,
) -> int:
    """Runs until `stop` is set; the exit status: 0, or 1 when it could not start or the operator got a 403."""
    try:
        plane = ControlPlane(fleet, apiserver_port=port)
    except (MissingBinaryError, ControlPlaneError) as error:
        say(f"error: {error}")
        return 1
    try:
        with plane:
            path = write_portable_kubeconfig(plane.kubeconfig, kubeconfig)
            say(f"control plane serving at {plane.server} ({len(fleet)} KWOK nodes); kubeconfig: {path}")
            say(f"  logs: {plane.state_dir / 'logs'}; fail a pod: kubectl annotate pod NAME {FAIL_ANNOTATION}=1")
            if not operator:
                stop.wait()
                return 0
            return _serve_operator(plane, watched, stop, say)
    except (MissingBinaryError, ControlPlaneError) as error:
        say(f"error: {str(error).splitlines()[0]} (see {plane.state_dir / 'logs'})")
        return 1


def _serve_operator(plane: ControlPlane, watched: Sequence[str], stop: threading.Event, say: Say) -> int:
    install = install_operator(plane, watched=watched)
    with OperatorProcess(plane, install) as process:
        say(
            f"operator running as {install.username} (chart {install.release} in {install.namespace}, "
            f"serving {', '.join(watched)}); log: {process.log_path}"
        )
        stop.wait()
    denied = forbidden_requests(plane, install.username)
    for line in denied[:10]:
        say(f"forbidden: {line}")
    if denied:
        say(f"the operator got {len(denied)} forbidden (403) answers: the chart's RBAC lacks a rule")
        return 1
    return 0
