"""The embedded cluster: a Kubernetes API emulator with a simulated GPU fleet.

A test double for `gemop demo`, `gemop sim up`, integration tests and the e2e suite. The
operator's own code never imports it; it reaches the cluster over HTTP like any other.
"""

from gem_operator.sim.cluster import EmbeddedCluster
from gem_operator.sim.fleet import FleetError, load_fleet, make_fleet
from gem_operator.sim.lifecycle import LifecycleConfig

__all__ = ["EmbeddedCluster", "FleetError", "LifecycleConfig", "load_fleet", "make_fleet"]
