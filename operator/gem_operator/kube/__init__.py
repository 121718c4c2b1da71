"""The one seam to the Kubernetes API outside kopf itself (create/get/list/patch/delete)."""

from gem_operator.kube.client import ApplyResult, KubeApi
from gem_operator.kube.diff import is_subset

__all__ = ["ApplyResult", "KubeApi", "is_subset"]
