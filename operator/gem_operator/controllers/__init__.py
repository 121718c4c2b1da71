"""kopf handlers, one module per kind: observe -> plan -> apply -> status.

Importing this package registers every handler with kopf's default registry; ``REGISTRY`` keeps
that registry, so the operator runs these handlers even if something later replaces kopf's
default (kopf's own CLI and test runner do).
"""

import kopf

from gem_operator.controllers import serving, settings, training

REGISTRY = kopf.get_default_registry()

__all__ = ["REGISTRY", "serving", "settings", "training"]
