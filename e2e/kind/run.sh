#!/usr/bin/env bash
# The e2e suite on a kind cluster: create it, give its workers simulated GPUs, build and load the
# operator image, install the Helm chart, run `pytest e2e` against it with KUBECONFIG.
#
#   bash e2e/kind/run.sh                    # from the repository root
#
# Needs docker, kind (>= 0.20), kubectl, helm (>= 3.14) and a Python with the dev extra installed
# (`pip install -e ".[dev]"`). Environment:
#   CLUSTER=gem-e2e          kind cluster name
#   KEEP_CLUSTER=1           keep the cluster afterwards (default: delete it when the suite passes)
#   REUSE_CLUSTER=1          use an existing cluster of that name instead of creating one
#   BUILD_WORKLOADS=1        also build and load the workloads image (torch CPU, ~2 GB) and run the
#                            pods with it; by default the pods' image is never pulled, so they stay
#                            Pending and the suite checks what the operator owns (see e2e/conftest.py)
#   PYTHON=python3           interpreter that runs pytest
#   PYTEST_ARGS="-x -q"      extra pytest arguments
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="${ROOT}/e2e/kind"
CLUSTER="${CLUSTER:-gem-e2e}"
PYTHON="${PYTHON:-python3}"
# The suite's own namespace (values.yaml serves it); nothing else on the cluster is touched.
NAMESPACE=gem-e2e
OPERATOR_NS=gem-system
OPERATOR_IMAGE=gem-operator:e2e
WORKLOADS_IMAGE=gem-workloads:e2e
GPUS_PER_NODE=8
KUBECONFIG_FILE="$(mktemp -t gem-e2e-kubeconfig.XXXXXX)"
export KUBECONFIG="${KUBECONFIG_FILE}"

log() { printf '\n==> %s\n' "$*" >&2; }

for tool in docker kind kubectl helm "${PYTHON}"; do
  command -v "${tool}" >/dev/null || { echo "run.sh: ${tool} is not on PATH" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || { echo "run.sh: the Docker daemon is not reachable" >&2; exit 2; }

passed=0
cleanup() {
  if [[ "${passed}" != 1 ]]; then
    log "diagnostics"
    kubectl get nodes -o wide || true
    kubectl get gem,pods,deploy,svc -A -o wide || true
    kubectl -n "${OPERATOR_NS}" logs deploy/gem-operator --all-containers --tail=200 || true
  fi
  if [[ "${KEEP_CLUSTER:-0}" != 1 && "${passed}" == 1 ]]; then
    kind delete cluster --name "${CLUSTER}" || true
  else
    log "cluster ${CLUSTER} kept: kind export kubeconfig --name ${CLUSTER}"
  fi
  rm -f "${KUBECONFIG_FILE}"
}
trap cleanup EXIT

if [[ "${REUSE_CLUSTER:-0}" == 1 ]] && kind get clusters | grep -qx "${CLUSTER}"; then
  log "reusing kind cluster ${CLUSTER}"
  kind export kubeconfig --name "${CLUSTER}" --kubeconfig "${KUBECONFIG_FILE}"
else
  log "creating kind cluster ${CLUSTER}"
  kind create cluster --name "${CLUSTER}" --config "${HERE}/cluster.yaml" --kubeconfig "${KUBECONFIG_FILE}" --wait 180s
fi

log "giving GPU workers ${GPUS_PER_NODE} simulated nvidia.com/gpu each"
# Extended resources on a node's status, as a device plugin would report them. No device plugin runs,
# so the kubelet leaves them alone and admits pods against them; nothing can use a real GPU, of course.
gpu_nodes="$(kubectl get nodes -l nvidia.com/gpu.present=true -o jsonpath='{.items[*].metadata.name}')"
[[ -n "${gpu_nodes}" ]] || { echo "run.sh: no node labelled nvidia.com/gpu.present=true" >&2; exit 1; }
for node in ${gpu_nodes}; do
  kubectl patch node "${node}" --subresource=status --type=json -p "[
    {\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"${GPUS_PER_NODE}\"},
    {\"op\": \"add\", \"path\": \"/status/allocatable/nvidia.com~1gpu\", \"value\": \"${GPUS_PER_NODE}\"}]" >/dev/null
  # kind labels each node with its own name; the planner's host tier reads kubernetes.io/hostname.
done
for node in ${gpu_nodes}; do
  for _ in $(seq 1 30); do
    got="$(kubectl get node "${node}" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')"
    [[ "${got}" == "${GPUS_PER_NODE}" ]] && break
    sleep 1
  done
  [[ "${got}" == "${GPUS_PER_NODE}" ]] || { echo "run.sh: ${node} reports ${got:-no} GPUs" >&2; exit 1; }
done

log "building ${OPERATOR_IMAGE}"
docker build --target operator -t "${OPERATOR_IMAGE}" "${ROOT}"
kind load docker-image "${OPERATOR_IMAGE}" --name "${CLUSTER}"
workload_image="gem-workloads:never-pulled"
if [[ "${BUILD_WORKLOADS:-0}" == 1 ]]; then
  log "building ${WORKLOADS_IMAGE} (CPU torch)"
  docker build --target workloads -t "${WORKLOADS_IMAGE}" "${ROOT}"
  kind load docker-image "${WORKLOADS_IMAGE}" --name "${CLUSTER}"
  workload_image="${WORKLOADS_IMAGE}"
fi

log "installing the chart"
# The chart puts its Role for the served namespace there, so it must exist first.
kubectl create namespace "${NAMESPACE}" --dry-run=client -o yaml | kubectl apply -f -
helm upgrade --install gem-operator "${ROOT}/charts/gem-operator" \
  --namespace "${OPERATOR_NS}" --create-namespace \
  --values "${HERE}/values.yaml" \
  --wait --timeout 5m
kubectl -n "${OPERATOR_NS}" rollout status deploy/gem-operator --timeout=120s

log "running the e2e suite against ${CLUSTER}"
cd "${ROOT}"
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words on purpose
GEM_E2E_NAMESPACE="${NAMESPACE}" GEM_E2E_WORKLOAD_IMAGE="${workload_image}" \
  "${PYTHON}" -m pytest e2e --kubeconfig "${KUBECONFIG_FILE}" -p no:cacheprovider ${PYTEST_ARGS:--q}
passed=1
log "e2e passed"
