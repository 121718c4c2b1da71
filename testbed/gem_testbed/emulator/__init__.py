"""The Kubernetes API emulator (on kmock 0.8): registry, store and watches, API semantics, HTTP.

See `registry` for how the modules stack into `Emulator`.
"""

from gem_testbed.emulator.registry import CRD_RESOURCE, NAMESPACES, PODS, ApiError, Resource
from gem_testbed.emulator.routes import Emulator, start_http
from gem_testbed.emulator.store import ChangeListener, Stored

__all__ = [
    "CRD_RESOURCE",
    "NAMESPACES",
    "PODS",
    "ApiError",
    "ChangeListener",
    "Emulator",
    "Resource",
    "Stored",
    "start_http",
]
