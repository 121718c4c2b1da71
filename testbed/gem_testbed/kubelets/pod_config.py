"""How the process kubelet turns a container spec into a process: argv, env, mounts (a test double's part).

- ``python`` is this interpreter; other commands are looked up beside it (the virtualenv's console
  scripts, e.g. ``gem-load``), then on ``PATH``;
- env: ``value`` (a ``*PORT*`` value equal to a declared containerPort becomes the pod's local
  port, a cluster DNS name such as a gang's ``MASTER_ADDR`` becomes 127.0.0.1),
  ``valueFrom.fieldRef`` (the Downward API fields a pod spec may name), Secret and
  ConfigMap keys, ``envFrom``; a missing one is a `ContainerConfigError`, as a kubelet's
  CreateContainerConfigError;
- mounts: ``emptyDir`` volumes are per-pod directories, ``hostPath`` ones per-node directories,
  ``configMap`` and ``secret`` ones per-pod directories holding a file per key;
  mount paths in arguments and env values are rewritten to them, and so is the termination
  message path; URIs under a configured origin prefix are rewritten to the local origin;
- ``--port``-style arguments naming a declared containerPort get the pod's own loopback port.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from gem_testbed.emulator import Emulator, Resource
from gem_testbed.emulator.objects import Obj

SECRETS = Resource("", "v1", "secrets")
CONFIGMAPS = Resource("", "v1", "configmaps")
TERMINATION_LOG = "/dev/termination-log"
LOOPBACK = "127.0.0.1"
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
CLUSTER_DNS = re.compile(rf"{_LABEL}(\.{_LABEL})*\.svc(\.cluster\.local)?")
"""A cluster DNS name (``pod.service.namespace.svc``, ``service.namespace.svc``), resolved to the loopback."""


class ContainerConfigError(Exception):
    """What a kubelet reports as CreateContainerConfigError (a missing Secret key, ...)."""


class PodDirs(Protocol):
    """What the setup needs to know about a pod being started."""

    pod: Obj
    dir: Path
    node_dir: Path
    ports: dict[str, int]


def field_value(pod: Obj, path: str, ports: Mapping[str, int]) -> str:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": LOOPBACK,
        "status.podIPs": LOOPBACK,
        "status.hostIP": LOOPBACK,
    }
    if path in simple:
        return str(simple[path] or "")
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(source) or {}).get(path[len(prefix) + 2 : -2], ""))
    raise ContainerConfigError(f"env fieldRef.fieldPath {path!r} is not supported by the process kubelet")


class ContainerSetup:
    """Mixin of the process kubelet: needs `emulator`, `config.origins` and `config.env`."""

    emulator: Emulator
    config: Any

    def _mounts(self, run: PodDirs, container: Obj) -> dict[str, Path]:
        volumes = {v.get("name"): v for v in (run.pod.get("spec") or {}).get("volumes") or []}
        out: dict[str, Path] = {}
        for m in container.get("volumeMounts") or []:
            volume = volumes.get(m.get("name")) or {}
            if "hostPath" in volume:
                local = run.node_dir / str(volume["hostPath"].get("path", "host")).strip("/")
            else:
                local = run.dir / "volumes" / str(m.get("name"))
            local.mkdir(parents=True, exist_ok=True)
            if "configMap" in volume or "secret" in volume:
                self._project(run, volume, local)
            out[str(m["mountPath"]).rstrip("/")] = local
        term = run.dir / f"{container.get('name', 'c')}.termination-log"
        out[str(container.get("terminationMessagePath") or TERMINATION_LOG)] = term
        return out

    def _project(self, run: PodDirs, volume: Obj, local: Path) -> None:
        """A configMap or secret volume: one file per key (or per listed item), as the kubelet projects them."""
        kind = "secret" if "secret" in volume else "configmap"
        source = volume["secret"] if kind == "secret" else volume["configMap"]
        name = str(source.get("secretName") or source.get("name") or "")
        data = self._secret_or_map(run.pod["metadata"]["namespace"], kind, name)
        if data is None:
            if source.get("optional"):
                return
            raise ContainerConfigError(f'{"secret" if kind == "secret" else "configmap"} "{name}" not found')
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            if item.get("key") in data:
                target = local / str(item.get("path") or item["key"])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(data[item["key"]])

    def _rewrite(self, value: str, run: PodDirs, mounts: Mapping[str, Path]) -> str:
        if CLUSTER_DNS.fullmatch(value):
            return LOOPBACK  # every pod here is 127.0.0.1 (a gang's MASTER_ADDR, a Service's name)
        for prefix, origin in sorted(self.config.origins.items(), key=lambda kv: -len(kv[0])):
            if value == prefix or value.startswith(prefix.rstrip("/") + "/"):
                return str(origin).rstrip("/") + value[len(prefix.rstrip("/")) :]
        for path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if value == path or value.startswith(path + "/"):
                return str(local) + value[len(path) :]
        if "=" in value and value.startswith("-"):
            flag, _, rest = value.partition("=")
            return f"{flag}={self._rewrite(rest, run, mounts)}"
        return value

    def _argv(self, run: PodDirs, container: Obj, mounts: Mapping[str, Path]) -> list[str]:
        command = [str(a) for a in container.get("command") or []]
        args = [str(a) for a in container.get("args") or []]
        argv = command + args
        if not argv:
            raise ContainerConfigError(f"container {container.get('name')!r} has no command: images are not run here")
        out: list[str] = []
        for i, token in enumerate(argv):
            previous = argv[i - 1] if i else ""
            if previous.startswith("-") and previous.lower().endswith("port") and token in run.ports:
                out.append(str(run.ports[token]))
            else:
                out.append(self._rewrite(token, run, mounts))
        exe = out[0]
        if exe in ("python", "python3"):
            out[0] = sys.executable
        elif "/" not in exe:
            beside = Path(sys.executable).parent / exe
            found = str(beside) if beside.exists() else shutil.which(exe)
            if found is None:
                raise ContainerConfigError(f'exec: "{exe}": executable file not found in $PATH')
            out[0] = found
        return out

    def _secret_or_map(self, namespace: str, kind: str, name: str) -> dict[str, str] | None:
        res = SECRETS if kind == "secret" else CONFIGMAPS
        obj = self.emulator.get_object(res, namespace, name)
        if obj is None:
            return None
        data = {k: str(v) for k, v in (obj.get("data") or {}).items()}
        if kind == "secret":
            data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
            data.update({k: str(v) for k, v in (obj.get("stringData") or {}).items()})
        return data

    def _env(self, run: PodDirs, container: Obj, mounts: Mapping[str, Path]) -> dict[str, str]:
        namespace = run.pod["metadata"]["namespace"]
        base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "PYTHONPATH", "TMPDIR") if k in os.environ}
        env: dict[str, str] = {**base, "HOSTNAME": run.pod["metadata"]["name"], **self.config.env}
        for source in container.get("envFrom") or []:
            for kind in ("secret", "configMap"):
                ref = source.get(f"{kind}Ref")
                if ref is None:
                    continue
                data = self._secret_or_map(namespace, kind.lower(), ref.get("name", ""))
                if data is None and not ref.get("optional"):
                    raise ContainerConfigError(f'{kind} "{ref.get("name")}" not found')
                env.update({source.get("prefix", "") + k: v for k, v in (data or {}).items()})
        for item in container.get("env") or []:
            name = str(item.get("name"))
            if "value" in item:
                value = str(item["value"])
                if "PORT" in name.upper() and value in run.ports:
                    value = str(run.ports[value])
                env[name] = self._rewrite(value, run, mounts)
                continue
            source = item.get("valueFrom") or {}
            if "fieldRef" in source:
                env[name] = field_value(run.pod, str(source["fieldRef"].get("fieldPath", "")), run.ports)
            elif "secretKeyRef" in source or "configMapKeyRef" in source:
                kind = "secret" if "secretKeyRef" in source else "configmap"
                ref = source.get("secretKeyRef") or source.get("configMapKeyRef") or {}
                data = self._secret_or_map(namespace, kind, ref.get("name", ""))
                if data is None or ref.get("key") not in data:
                    if ref.get("optional"):
                        continue
                    raise ContainerConfigError(f'couldn\'t find key {ref.get("key")} in {kind} "{ref.get("name")}"')
                env[name] = data[ref["key"]]
            elif "resourceFieldRef" in source:
                env[name] = "0"
        return env


__all__ = ["LOOPBACK", "TERMINATION_LOG", "ContainerConfigError", "ContainerSetup", "PodDirs", "field_value"]
