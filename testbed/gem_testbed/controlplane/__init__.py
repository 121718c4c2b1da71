"""A real Kubernetes control plane for the test suites, from binaries built out of pinned Go modules.

`scripts/control-plane/build.sh` builds etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK, the Kueue manager and helm into a per-user cache; `ControlPlane` starts the
core of them on loopback with KWOK playing the kubelets of a GPU fleet, and the Kueue manager on request.
"""

from gem_testbed.controlplane.binaries import (
    CORE,
    MissingBinaryError,
    cache_dir,
    find_binary,
    missing_binaries,
)
from gem_testbed.controlplane.kwok import INIT_MESSAGE_ANNOTATION, kwok_nodes
from gem_testbed.controlplane.launcher import ControlPlane, Timeouts
from gem_testbed.controlplane.processes import ControlPlaneError

__all__ = [
    "CORE",
    "INIT_MESSAGE_ANNOTATION",
    "ControlPlane",
    "ControlPlaneError",
    "MissingBinaryError",
    "Timeouts",
    "cache_dir",
    "find_binary",
    "kwok_nodes",
    "missing_binaries",
]
