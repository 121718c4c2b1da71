"""gem-operator: a Kubernetes operator for GEM-style recommendation models."""

__version__ = "0.1.0"
