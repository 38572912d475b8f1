# syntax=docker/dockerfile:1
# The autobatch sidecar: core dependencies only (no torch, no tritonserver).
#
#   docker build -t autobatch:0.1.0 .
#   docker run -v $PWD/deploy/k8s/base/config:/etc/autobatch:ro autobatch:0.1.0
#
# The pod in deploy/k8s mounts sidecar.yaml, the profiles and the token at
# /etc/autobatch (one projected volume); the root file system is read-only.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# One wheel for autobatch and one for each core dependency, so the runtime
# stage installs offline and carries no build tools.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
# Kept equal to pyproject.toml's version (tests/test_deploy.py checks).
ARG AUTOBATCH_VERSION=0.1.0
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels "autobatch==${AUTOBATCH_VERSION}" \
    && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin autobatch
USER 10001:10001
EXPOSE 9400
# The sidecar answers /healthz on its listen port (server.listen in sidecar.yaml).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:9400/healthz', timeout=2).status != 200)"]
# `autobatch run` stops on SIGTERM: the loop ends, the HTTP server closes, exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["autobatch"]
CMD ["run", "--config", "/etc/autobatch/sidecar.yaml"]
