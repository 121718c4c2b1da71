"""Knowledge transfer from the foundation model to a vertical model, measured:
``python -m gem_workloads.transfer eval --help``."""
