"""Why a default query found nothing for a pool's pods: the usual real-cluster causes, with their fix.

An empty answer is already a hold (never a zero), but a hold that lasts needs a cause a platform
engineer can act on, in the `MetricsUnavailable` message itself. Each diagnosis asks Prometheus a
few `count` queries, only while the reading is empty and only for the default queries: a custom
query's metric and label names are the user's own. "" when no usual cause applies (the pods'
series are not scraped yet, say).

`count` renders `$namespace` and `$pods` like the query it explains and answers the count (0 for an
empty vector); it raises `PrometheusError` when Prometheus does not answer, which callers turn
into "" (the reading's own error already says the query failed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

Count = Callable[[str], Awaitable[float]]

SM_METRIC = "DCGM_FI_PROF_SM_ACTIVE"

# Where docs/dcgm-exporter.md says how to scrape each kind of series.
_SM_DOC = "docs/dcgm-exporter.md"
_SERVER_DOC = "docs/dcgm-exporter.md, section 4"


async def why_no_sm_samples(count: Count) -> str:
    """dcgm-exporter's series: the scrape renamed its pod labels, it attributes no GPU to a pod, or
    there are none."""
    if await count(f'count({SM_METRIC}{{exported_namespace="$namespace", exported_pod=~"$pods"}})') > 0:
        # The target already has namespace/pod labels (Kubernetes service discovery) and
        # honor_labels is off, so the exporter's own labels were renamed.
        return (
            "its series carry exported_namespace and exported_pod: the scrape renamed the exporter's "
            "namespace and pod labels because its target has labels of those names; set honor_labels: "
            "true on the dcgm-exporter scrape job (honorLabels: true on a ServiceMonitor)"
        )
    total = await count(f"count({SM_METRIC})")
    if total == 0:
        return (
            f"Prometheus holds no {SM_METRIC} series at all: is dcgm-exporter scraped, with the "
            f"DCP profiling fields on? ({_SM_DOC})"
        )
    if await count(f'count({SM_METRIC}{{pod!=""}})') == 0:
        return (
            f"none of its {total:.0f} {SM_METRIC} series has a pod label: the exporter does not "
            "attribute GPUs to pods (DCGM_EXPORTER_KUBERNETES=true and /var/lib/kubelet/pod-resources "
            f"mounted; {_SM_DOC})"
        )
    return ""


async def why_no_server_series(count: Count, metric: str, who: str = "ranking servers", port: str = "http") -> str:
    """A workload's own series (`metric`, the raw name the default query reads; `who` serve it on
    their `port`): unlike dcgm-exporter's, their namespace and pod labels come from the scrape, so
    the usual causes are a scrape that does not reach them or one that names those labels otherwise."""
    if await count(f'count({metric}{{kubernetes_namespace="$namespace", kubernetes_pod_name=~"$pods"}})') > 0:
        # The names of the older `kubernetes-pods` job of Prometheus's example configuration.
        return (
            f"its {metric} series carry kubernetes_namespace and kubernetes_pod_name: the scrape job "
            "names the pod labels otherwise; relabel __meta_kubernetes_namespace to namespace and "
            "__meta_kubernetes_pod_name to pod (a PodMonitor does), or use those names in the "
            f"spec's query ({_SERVER_DOC})"
        )
    total = await count(f"count({metric})")
    if total == 0:
        return (
            f"Prometheus holds no {metric} series at all: are the {who} scraped? They serve "
            f"/metrics on their `{port}` port ({_SERVER_DOC})"
        )
    if await count(f'count({metric}{{pod!=""}})') == 0:
        return (
            f"none of its {total:.0f} {metric} series has a pod label: the scrape must label each "
            "pod's series with its namespace and pod (a PodMonitor does; a kubernetes_sd_configs job "
            f"relabels __meta_kubernetes_namespace and __meta_kubernetes_pod_name; {_SERVER_DOC})"
        )
    return ""


__all__ = ["SM_METRIC", "Count", "why_no_server_series", "why_no_sm_samples"]
