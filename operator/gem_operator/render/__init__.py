"""Pure builders: (resource, plan) -> child manifests. No I/O, no clock, no Kubernetes client."""
