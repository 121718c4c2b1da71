"""The one seam to the Kubernetes API outside kopf itself (create/get/list/patch/delete)."""

from gem_operator.kube.client import Applied, ApplyResult, KubeApi
from gem_operator.kube.diff import is_subset
from gem_operator.kube.retry import KubeCallError, RetryPolicy

__all__ = ["Applied", "ApplyResult", "KubeApi", "KubeCallError", "RetryPolicy", "is_subset"]
