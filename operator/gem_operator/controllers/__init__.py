"""kopf handlers, one module per kind: observe -> plan -> apply -> status.

Importing this package registers every handler with kopf's default registry.
"""

from gem_operator.controllers import serving, settings, training

__all__ = ["serving", "settings", "training"]
