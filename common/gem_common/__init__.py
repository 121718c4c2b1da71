"""What the operator, the workloads and the testbed share: small, pure helpers with no project imports.

The workloads never import the operator (import-linter), so what both need lives here, below both:
the numeric argparse types (`argtypes`), bounded YAML loading (`yamldocs`) and how a trace's fields
are named and its numeric times read (`traces`). Nothing here imports `gem_operator`,
`gem_workloads`, `gem_testbed`, torch or ray.
"""
