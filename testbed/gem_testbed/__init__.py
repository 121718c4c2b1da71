"""The test rig of gem-operator: an embedded Kubernetes cluster and the drivers that exercise it.

Installed with the `testbed` extra (kmock, matplotlib); the operator never imports it and its
image does not ship it. Where each concern lives:

- `emulator/`: the Kubernetes API emulator (on kmock): object store and watches, API semantics
  (create, patch, scale, garbage collection, CRD admission), HTTP routing, bearer auth.
- `kubelets/`: what runs pods: the simulated scheduler and kubelet (`lifecycle`), the process
  kubelet that runs serving pods as local processes, their network (Service fronts,
  dcgm-exporters) and the minimal Deployment/DaemonSet controllers.
- `cluster.py`: `EmbeddedCluster`, the emulator and kubelets on a fleet of Nodes, in a thread.
- `servers/`: helper servers the rig starts: Prometheus, the nginx model origin, simulated DCGM.
- `faults/`: the fault-injecting proxy, the chaos driver and the malformed-input corpus.
- `drivers/`: `gemop demo`, `gemop loadtest` and the closed loop behind it.
- `plots/`: the PNGs of `gemop replay --plot`, the demo and the load test (matplotlib).
- `commands.py`: the `gemop` subcommands this package adds (entry points `gemop.commands`).
"""
