#!/usr/bin/env bash
# Builds the binaries of a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler), KWOK, the Kueue manager and helm from the Go modules pinned by the go.mod/go.sum files
# beside this script, into a cache outside the checkout:
#
#   ${GEM_CONTROL_PLANE_CACHE:-$HOME/.cache/gem-operator/control-plane}/<component>-<version>/<binary>
#
# A component is rebuilt only when its binary is missing or the stamp of its inputs (go.mod, go.sum, Go
# sources, Go version, build flags) differs. Builds run one at a time at the lowest priority with -p 1: the
# machines this runs on are small and shared. A failed build prints one line (component, module@version,
# first error) and the script goes on with the next one. The cache's components.tsv lists every component
# with its status (available, missing, building, failed), rewritten after each step so that it is current
# even during a long build; tests read it to skip what is missing and say why.
#
# Usage: build.sh [component ...]   (default: all; names as in the table below)
# Exit status: 0 when every requested component is available, 1 otherwise.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${GEM_CONTROL_PLANE_CACHE:-$HOME/.cache/gem-operator/control-plane}"
LOG_DIR="${GEM_CONTROL_PLANE_LOG_DIR:-/tmp}"

# component | module dir | main module (its version names the cache folder) | package | version ldflags
COMPONENTS=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|gem-operator/control-plane/etcd|"
  "kube-apiserver|kubernetes|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|k8s"
  "kube-controller-manager|kubernetes|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kube-controller-manager|k8s"
  "kube-scheduler|kubernetes|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kube-scheduler|k8s"
  "kwok|kwok|sigs.k8s.io/kwok|sigs.k8s.io/kwok/cmd/kwok|kwok"
  "kueue|kueue|sigs.k8s.io/kueue|sigs.k8s.io/kueue/cmd/kueue|kueue"
  "helm|helm|helm.sh/helm/v4|helm.sh/helm/v4/cmd/helm|helm"
)

export CGO_ENABLED=0
export GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
# Every pinned module accepts this machine's Go; never let the go command fetch another toolchain silently.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

ldflags_for() {
  # Version strings the binaries report (they are otherwise built as v0.0.0 "devel" builds).
  local kind="$1" version="$2" minor
  case "$kind" in
    k8s)
      minor="${version#v1.}"
      minor="${minor%%.*}"
      echo "-s -w -X k8s.io/component-base/version.gitVersion=${version}" \
        "-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}" \
        "-X k8s.io/component-base/version.gitTreeState=clean"
      ;;
    kwok) echo "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${version#v}" ;;
    kueue) echo "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${version}" ;;
    helm) echo "-s -w -X helm.sh/helm/v4/internal/version.version=${version}" ;;
    *) echo "-s -w" ;;
  esac
}

module_version() {
  (cd "$HERE/$1" && go list -m -f '{{.Version}}' "$2" 2>/dev/null)
}

input_stamp() {
  # Everything that decides the binary's content; a change in any of them means a rebuild.
  local dir="$1" pkg="$2" ldflags="$3"
  {
    go version
    echo "CGO_ENABLED=$CGO_ENABLED GOFLAGS=$GOFLAGS GOOS=$(go env GOOS) GOARCH=$(go env GOARCH)"
    echo "package=$pkg ldflags=$ldflags"
    (cd "$HERE/$dir" && cat go.mod go.sum && find . -name '*.go' | LC_ALL=C sort | xargs -r cat)
  } | sha256sum | cut -d' ' -f1
}

copy_manifests() {
  # The Kueue manager needs its CRDs and webhook configurations from the same release; they travel
  # with the binary so that the launcher never reads the module cache.
  local name="$1" dir="$2" module="$3" out="$4" src
  [[ "$name" == kueue ]] || return 0
  [[ -f "$out/config/webhook.yaml" && -d "$out/config/crd-conversion" ]] && return 0
  src="$(cd "$HERE/$dir" && go list -m -f '{{.Dir}}' "$module")" || return 1
  mkdir -p "$out/config/crd" "$out/config/crd-conversion"
  cp "$src"/config/components/crd/bases/*.yaml "$out/config/crd/" &&
    cp "$src"/config/components/crd/patches/webhook_in_*.yaml "$out/config/crd-conversion/" &&
    cp "$src/config/components/webhook/manifests.yaml" "$out/config/webhook.yaml"
}

first_error() {
  # The first line of the log that is neither download chatter nor a "# package" header.
  grep -v -E '^(go: (downloading|finding|extracting)|# )' "$1" | grep -m1 -v '^[[:space:]]*$' | cut -c1-300
}

build_one() {
  local name="$1" dir="$2" module="$3" pkg="$4" kind="$5" version ldflags out stamp log started secs
  version="$(module_version "$dir" "$module")"
  if [[ -z "$version" ]]; then
    echo "FAILED $name: cannot read the version of $module from $HERE/$dir/go.mod"
    record "$name" "?" failed "" 0 "unreadable go.mod"
    return 1
  fi
  ldflags="$(ldflags_for "$kind" "$version")"
  out="$CACHE/$name-$version"
  stamp="$(input_stamp "$dir" "$pkg" "$ldflags")"
  if [[ -x "$out/$name" && -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp" ]]; then
    copy_manifests "$name" "$dir" "$module" "$out"
    echo "up to date: $name $version ($out/$name)"
    record "$name" "$version" available "$out/$name" 0 "cached"
    return 0
  fi
  if [[ "$BUILD_REQUESTED" != *" $name "* ]]; then
    record "$name" "$version" missing "$out/$name" 0 "not built"
    return 0
  fi
  log="$LOG_DIR/cp-build-$name.log"
  echo "building: $name $module@$version (log: $log)"
  record "$name" "$version" building "$out/$name" 0 "log: $log"
  mkdir -p "$out"
  rm -f "$out/.stamp" "$out/$name.tmp"
  started="$(date +%s)"
  if (cd "$HERE/$dir" && nice -n 19 go build -p 1 -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg") >"$log" 2>&1; then
    mv -f "$out/$name.tmp" "$out/$name"
    copy_manifests "$name" "$dir" "$module" "$out"
    echo "$stamp" >"$out/.stamp"
    secs=$(($(date +%s) - started))
    echo "built: $name $version in ${secs}s ($(du -h "$out/$name" | cut -f1))"
    record "$name" "$version" available "$out/$name" "$secs" "built"
    return 0
  fi
  rm -f "$out/$name.tmp"
  secs=$(($(date +%s) - started))
  echo "FAILED $name: $module@$version: $(first_error "$log")"
  record "$name" "$version" failed "$out/$name" "$secs" "see $log"
  return 1
}

record() {
  # One row per component in its own file; the summary is reassembled in table order after each change.
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >"$ROWS/$1"
  {
    printf 'component\tversion\tstatus\tpath\tbuild_seconds\tnote\n'
    local spec
    for spec in "${COMPONENTS[@]}"; do
      [[ -f "$ROWS/${spec%%|*}" ]] && cat "$ROWS/${spec%%|*}"
    done
  } >"$SUMMARY.tmp"
  mv -f "$SUMMARY.tmp" "$SUMMARY"
}

for_each_component() {
  local spec name dir module pkg kind failed=0
  for spec in "${COMPONENTS[@]}"; do
    IFS='|' read -r name dir module pkg kind <<<"$spec"
    build_one "$name" "$dir" "$module" "$pkg" "$kind" || failed=1
  done
  return "$failed"
}

main() {
  local spec name failed=0 requested
  SUMMARY="$CACHE/components.tsv"
  ROWS="$CACHE/.rows"
  mkdir -p "$CACHE" "$ROWS"
  exec 9>"$CACHE/.lock"
  if ! flock -n 9; then
    echo "another build.sh is working on $CACHE; wait for it" >&2
    return 1
  fi
  if [[ $# -gt 0 ]]; then
    requested=" $* "
  else
    requested=" "
    for spec in "${COMPONENTS[@]}"; do requested+="${spec%%|*} "; done
  fi
  # First the state of everything without building, then the builds one by one.
  BUILD_REQUESTED=" " for_each_component >/dev/null
  BUILD_REQUESTED="$requested"
  for_each_component || failed=1
  echo "summary: $SUMMARY"
  column -t -s $'\t' "$SUMMARY" 2>/dev/null || cat "$SUMMARY"
  for name in $requested; do
    grep -q -P "^${name}\t[^\t]*\tavailable\t" "$SUMMARY" || failed=1
  done
  return "$failed"
}

main "$@"
