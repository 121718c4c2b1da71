{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "gem-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "gem-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gem-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gem-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gem-operator
{{- end -}}

{{- define "gem-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gem-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gem-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gem-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository:tag or repository@digest; tag defaults to the chart's appVersion. */}}
{{- define "gem-operator.imageRef" -}}
{{- $image := .image -}}
{{- if eq (toString $image.tag) "latest" -}}
{{- fail (printf "%s.tag=latest is not allowed: a moving tag makes replicas run different code; pin a version or set %s.digest" .path .path) -}}
{{- end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .appVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the operator serves, as a JSON list (the release namespace when none are given). */}}
{{- define "gem-operator.namespaces" -}}
{{- if .Values.watch.namespaces -}}
{{- toJson (uniq .Values.watch.namespaces) -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* Cross-field checks the JSON schema cannot express; each message names the values to change. */}}
{{- define "gem-operator.validate" -}}
{{- if and .Values.peering.standalone (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "peering.standalone=true runs without leader election, so replicaCount must be 1 (got %d): set replicaCount=1 or peering.standalone=false" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and .Values.watch.allNamespaces .Values.watch.namespaces -}}
{{- fail "watch.allNamespaces=true and watch.namespaces are mutually exclusive: clear watch.namespaces or set watch.allNamespaces=false" -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (ge (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be below replicaCount (%d), or no node could ever be drained" (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled=true needs metrics.service.enabled=true (the ServiceMonitor selects that Service)" -}}
{{- end -}}
{{- if and .Values.metrics.service.enabled (eq (int .Values.metrics.port) 0) -}}
{{- fail "metrics.service.enabled=true needs metrics.port > 0 (0 disables the operator's /metrics)" -}}
{{- end -}}
{{- if eq (int .Values.metrics.port) (int .Values.liveness.port) -}}
{{- fail (printf "metrics.port and liveness.port must differ (both %d)" (int .Values.liveness.port)) -}}
{{- end -}}
{{- end -}}

{{- /*
  Exactly the API calls the operator makes; no wildcards. The operator never reads Secrets:
  workload pods reference them by name (envFrom), which needs no permission of the operator's.
*/}}
{{- define "gem-operator.namespacedRules" -}}
# The three gem.dev kinds: watched, annotated by kopf (progress, finalizer), status written.
- apiGroups: ["gem.dev"]
  resources: ["gemtrainings", "rankingservices", "solarisprecomputes"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["gem.dev"]
  resources: ["gemtrainings/status", "rankingservices/status", "solarisprecomputes/status"]
  verbs: ["patch"]
# Children set blockOwnerDeletion on their ownerReference; with OwnerReferencesPermissionEnforcement
# that needs update on the owner's finalizers subresource.
- apiGroups: ["gem.dev"]
  resources: ["gemtrainings/finalizers", "rankingservices/finalizers", "solarisprecomputes/finalizers"]
  verbs: ["update"]
# Children: training pods, rendezvous/serving Services, resolved-config ConfigMaps, pools.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Kueue: one Workload per queued GEMTraining; its status is released on eviction, Finished at the end.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
# Events for decisions (placed, restarted, scaled, rejected), through both event APIs.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# kopf peering: the replicas announce themselves on the peering object.
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end -}}
