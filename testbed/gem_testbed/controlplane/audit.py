"""The API server's audit log, kept for service accounts: how to tell what an operator was denied.

An operator that runs with a chart's ServiceAccount token can only do what the chart's RBAC grants.
A missing rule shows up as HTTP 403 on one call, which a retrying client may log and survive; the
audit log records every such answer with the identity that got it, whatever the client printed.
The policy records request metadata (verb, resource, response code) for service accounts outside
kube-system, so the controller manager's own controllers and the admin-certificate components
(scheduler, KWOK, Kueue) write nothing and the log stays small under load.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: None
    userGroups: ["system:serviceaccounts:kube-system"]
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
"""


def service_account_user(namespace: str, name: str) -> str:
    """The user name the API server gives a ServiceAccount's tokens."""
    return f"system:serviceaccount:{namespace}:{name}"


def apiserver_flags(state_dir: pathlib.Path, log_path: pathlib.Path) -> list[str]:
    """Writes the policy into `state_dir` and returns the kube-apiserver flags that enable it."""
    policy = state_dir / "audit-policy.yaml"
    policy.write_text(POLICY)
    return [f"--audit-policy-file={policy}", f"--audit-log-path={log_path}", "--audit-log-maxbackup=0"]


def events(log_path: pathlib.Path, username: str | None = None) -> Iterator[dict[str, Any]]:
    """Audit events in the log (one JSON object a line), of one user when `username` is given."""
    try:
        handle = log_path.open(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with handle:
        for line in handle:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if username is None or (event.get("user") or {}).get("username") == username:
                yield event


def forbidden(log_path: pathlib.Path, username: str | None = None) -> list[dict[str, Any]]:
    """Events answered 403 (RBAC denials, and admission plugins that forbid)."""
    return [e for e in events(log_path, username) if (e.get("responseStatus") or {}).get("code") == 403]


def describe(event: dict[str, Any]) -> str:
    """One line: who, verb, what, and the code, e.g. for an assertion message."""
    ref = event.get("objectRef") or {}
    resource = "/".join(p for p in (ref.get("apiGroup"), ref.get("resource"), ref.get("subresource")) if p)
    where = f" in {ref['namespace']}" if ref.get("namespace") else ""
    code = (event.get("responseStatus") or {}).get("code")
    return f"{(event.get('user') or {}).get('username')} {event.get('verb')} {resource}{where}: HTTP {code}"
