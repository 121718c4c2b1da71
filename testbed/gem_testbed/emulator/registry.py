"""The Kubernetes API emulator's base: kmock's `KubernetesEmulator` and the resources it knows.

The emulator is kmock's emulator plus the API-server semantics that kopf, lightkube and kubectl
rely on and kmock 0.8 lacks (each fix is marked `FIX:` with why), in four modules, one concern
each, stacked as one class (each module's class extends the one before):

- `registry` (here): the kmock pin, the resource registry (built-in kinds from kmock's bundled
  discovery snapshot, CRDs as they are created), Status-shaped errors;
- `store`: the object store and watch fan-out (`ObjectStore`);
- `semantics`: create, patch, scale, delete and garbage collection, admission (`ApiSemantics`);
- `routes`: HTTP routing onto those methods, discovery fixes, the TCP server (`Emulator`).

It is the only package that touches kmock (pinned to exactly 0.8 because it adapts kmock
internals: `_handle`, `_serve_version`, `_lock`, `_requests`, `parsing.parse_path`). kmock gives
request parsing, discovery and Status-shaped errors.

The in-process API (`create_object`, `patch_object`, `delete_object`, `get_object`,
`list_objects`) is what the pod lifecycle and `EmbeddedCluster` use; HTTP requests are routed to
the same methods.
"""

from __future__ import annotations

import functools
import gzip
import importlib.metadata
import importlib.resources
from typing import Any

import attrs
import kmock

from gem_testbed.emulator import admission
from gem_testbed.emulator.crds import ALL_VERBS, ResourceSpec

KMOCK_VERSION = importlib.metadata.version("kmock")
if KMOCK_VERSION != "0.8":  # pragma: no cover - pinned in pyproject.toml
    raise ImportError(f"gem_testbed.emulator adapts kmock 0.8 internals; found kmock {KMOCK_VERSION}")

Resource = kmock.resource
CRD_RESOURCE = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NAMESPACES = Resource("", "v1", "namespaces")
PODS = Resource("", "v1", "pods")
CONFIGMAPS = Resource("", "v1", "configmaps")
# kube-apiserver's request-body limit (3 MiB) and a ConfigMap's data limit (1 MiB).
MAX_REQUEST_BYTES = 3 * 1024 * 1024
MAX_CONFIGMAP_BYTES = 1024 * 1024


@functools.cache
def _bundled_resources() -> bytes:
    blob = importlib.resources.files("kmock._internal").joinpath("resources.json.gz").read_bytes()
    return gzip.decompress(blob)


def api_version_of(res: Any) -> str:
    return str(res.version) if not res.group else f"{res.group}/{res.version}"


class ApiError(kmock.KubernetesError):  # type: ignore[misc]
    """A Status-shaped error; `reason` uses the API server's words (NotFound, AlreadyExists...)."""


def api_error(status: int, reason: str, message: str, details: dict[str, Any] | None = None) -> ApiError:
    return ApiError(status=status, reason=reason, message=message, details=details or {"causes": []})


@attrs.define(kw_only=True)
class ResourceRegistry(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator and the resources it serves: see the module docstring."""

    _specs: dict[Any, ResourceSpec] = attrs.field(factory=dict, init=False)
    # kmock's resource registry matches keys through typing Protocols (slow per lookup); every
    # request asks several times, so known resources are remembered here.
    _infos: dict[Any, Any] = attrs.field(factory=dict, init=False)
    _schemas: dict[Any, admission.Schema | None] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # Built-in kinds (Pod, Node, Deployment, Event, events.k8s.io, Lease, CRD, ...) from
        # the discovery snapshot kmock bundles, so clients find them without declarations.
        # (Read directly: kmock's load_bundled() uses a deprecated importlib API that warns.)
        self.resources.load_data(_bundled_resources())

    # -- resource registry -------------------------------------------------------------------------

    def register(self, spec: ResourceSpec) -> Any:
        res = Resource(spec.group, spec.version, spec.plural)
        self._specs[res] = spec
        self._infos.pop(res, None)
        self._schemas.pop(res, None)
        self.resources[res] = kmock.ResourceInfo(
            namespaced=spec.namespaced,
            kind=spec.kind,
            singular=spec.singular or spec.kind.lower(),
            verbs=set(ALL_VERBS),
            shortnames=set(spec.shortnames),
            categories=set(spec.categories),
            subresources=set(spec.subresources),
        )
        return res

    def info(self, res: Any) -> Any:
        """The discovery info of a known resource (404 otherwise; never auto-creates one)."""
        info = self._infos.get(res)
        if info is not None:
            return info
        if res is None or not res.plural or res not in self.resources:
            raise api_error(404, "NotFound", f"the server could not find the requested resource {res}")
        info = self._infos[res] = self.resources[res]
        return info

    def resolve(self, api_version: str, kind_or_plural: str) -> Any:
        """Find a resource by apiVersion and kind, plural, singular or short name."""
        group, _, version = api_version.rpartition("/")
        wanted = kind_or_plural.lower()
        for res in self.resources:
            if res.group == group and res.version == version:
                info = self.resources[res]
                names = {res.plural, (info.kind or "").lower(), info.singular or "", *info.shortnames}
                if wanted in names:
                    return res
        raise api_error(404, "NotFound", f"no resource {kind_or_plural!r} in {api_version!r}")
