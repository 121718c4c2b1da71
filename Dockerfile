# syntax=docker/dockerfile:1.7
#
# Two images from one file:
#   docker build --target operator  -t ghcr.io/gem-dev/gem-operator:0.1.0 .
#   docker build --target workloads -t ghcr.io/gem-dev/gem-workloads:0.1.0 .                  # CPU torch
#   docker build --target workloads --build-arg WORKLOADS_BASE=cuda -t ghcr.io/gem-dev/gem-workloads:0.1.0-cuda .
#
# Bases are pinned by exact tag; pin them by digest in your registry's build with
#   --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:<digest>   (likewise CUDA_IMAGE).
# Both images run as uid 65532 with nothing to write outside /tmp, so a read-only root filesystem
# works (the chart mounts an emptyDir at /tmp). No credentials are needed to build, and none are
# copied in: model stores and checkpoints are reached at run time with Secrets the pods reference.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
# cpu: the PyTorch CPU wheel on the slim Python base; cuda: the CUDA wheel on NVIDIA's runtime base.
ARG WORKLOADS_BASE=cpu

# ---------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS python-base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    PATH=/opt/venv/bin:${PATH}
RUN groupadd --system --gid 65532 gem \
    && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin gem

# ---------------------------------------------------------------------------------------------------
# The operator: only its own dependencies (no torch, no ray).
FROM python-base AS operator-build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common/ common/
COPY operator/ operator/
COPY workloads/ workloads/
RUN python -m venv /opt/venv \
    && pip install --no-compile . \
    && python -m compileall -q /opt/venv/lib

FROM python-base AS operator
LABEL org.opencontainers.image.title="gem-operator" \
      org.opencontainers.image.description="Kubernetes operator for GEM training, precompute and ranking" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=operator-build /opt/venv /opt/venv
USER 65532:65532
WORKDIR /tmp
# kopf liveness (/healthz) and Prometheus /metrics.
EXPOSE 8080 9090
ENTRYPOINT ["gemop"]
CMD ["run", "--all-namespaces"]

# ---------------------------------------------------------------------------------------------------
# Workloads: what the pods run (torchrun -m gem_workloads.training, python -m gem_workloads.serving,
# python -m gem_workloads.precompute, gem-load).
FROM python-base AS workloads-base-cpu
ENV TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu \
    FBGEMM_PACKAGE=fbgemm-gpu-cpu==1.8.0

FROM ${CUDA_IMAGE} AS workloads-base-cuda
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    PATH=/opt/venv/bin:${PATH} \
    TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 \
    FBGEMM_PACKAGE=fbgemm-gpu==1.8.0
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 65532 gem \
    && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin gem

FROM workloads-base-${WORKLOADS_BASE} AS workloads-build
WORKDIR /src
# torch first, from the PyTorch index, so nothing below can pull a different (multi-GB) build;
# torchrec and fbgemm without their metadata's dependencies (it asks for the CUDA fbgemm-gpu).
RUN python3 -m venv /opt/venv \
    && pip install --index-url "${TORCH_INDEX_URL}" torch==2.13.0 \
    && pip install --no-deps "${FBGEMM_PACKAGE}" torchrec==1.8.0
COPY pyproject.toml README.md ./
COPY common/ common/
COPY operator/ operator/
COPY workloads/ workloads/
# The workloads extra names the CPU fbgemm; on CUDA keep the GPU build installed above instead.
RUN pip install --no-compile ".[workloads]" \
    && if [ "${FBGEMM_PACKAGE#fbgemm-gpu==}" != "${FBGEMM_PACKAGE}" ]; then \
         pip uninstall -y fbgemm-gpu-cpu && pip install --no-deps --force-reinstall "${FBGEMM_PACKAGE}"; \
       fi \
    && python -m compileall -q /opt/venv/lib

FROM workloads-base-${WORKLOADS_BASE} AS workloads
LABEL org.opencontainers.image.title="gem-workloads" \
      org.opencontainers.image.description="GEM training, serving, precompute and model loader" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor \
    RAY_TMPDIR=/tmp/ray
COPY --from=workloads-build /opt/venv /opt/venv
USER 65532:65532
WORKDIR /tmp
# The operator sets each pod's command; this default serves a ranking model.
CMD ["python", "-m", "gem_workloads.serving"]
