# syntax=docker/dockerfile:1
# The autobatch sidecar: core dependencies only (no torch, no tritonserver), each pinned
# with its hashes in deploy/image/requirements.lock (scripts/lock-image.sh writes it).
#
#   docker build -t autobatch:0.1.0 .
#   make image      # the same Dockerfile with podman, on a local Debian base (docs/deploy.md)
#
# The pod in deploy/k8s mounts sidecar.yaml, the profiles, the token and Triton's key at
# /etc/autobatch (one projected volume); the root file system is read-only.

# The base: Debian bookworm with Python 3.11. `make image` passes a local one built with
# debootstrap (scripts/image.sh); both stages must use the same (the venv links to its python3).
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
WORKDIR /src
# Every package, the build tools too, from a lock with hashes: the same bytes on every build.
# Behind a TLS-intercepting proxy, pass its CA bundle as the build secret pip-cert
# (scripts/image.sh does): pip trusts it for this step only, and it stays out of the image.
COPY deploy/image/requirements.lock deploy/image/build.lock ./
# The image's own venv first on PATH: `pip` below is its pip.
ENV PATH=/opt/autobatch/bin:$PATH
RUN --mount=type=secret,id=pip-cert \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
    && python3 -m venv /opt/build \
    && /opt/build/bin/pip install --no-cache-dir --require-hashes -r build.lock \
    && python3 -m venv /opt/autobatch \
    && pip install --no-cache-dir --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY src ./src
# Kept equal to pyproject.toml's version (tests/unit/test_deploy.py checks).
ARG AUTOBATCH_VERSION=0.1.0
RUN /opt/build/bin/pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels . \
    && pip install --no-cache-dir --no-deps --no-index --find-links=/wheels "autobatch==${AUTOBATCH_VERSION}"

FROM ${BASE}
ARG BASE
ARG AUTOBATCH_VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="autobatch" \
      org.opencontainers.image.description="Keeps a Triton model inside its latency SLO by swapping batching profiles (the sidecar)." \
      org.opencontainers.image.version="${AUTOBATCH_VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE}"
ENV PATH=/opt/autobatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=build /opt/autobatch /opt/autobatch
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin autobatch
USER 10001:10001
EXPOSE 9400
# The sidecar answers /healthz on its listen port (server.listen in sidecar.yaml).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:9400/healthz', timeout=2).status != 200)"]
# `autobatch run` stops on SIGTERM: the loop ends, the HTTP server closes, exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["autobatch"]
CMD ["run", "--config", "/etc/autobatch/sidecar.yaml"]
