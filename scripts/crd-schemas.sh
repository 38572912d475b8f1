#!/usr/bin/env bash
# The published CRD schemas (Gateway API, Istio, prometheus-operator) that
# tests/unit/test_deploy.py validates the kustomize output against: npm packages pinned
# by scripts/crd-schemas/package-lock.json, installed once per lock file.
set -euo pipefail
cd "$(dirname "$0")/crd-schemas"
if ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "crd-schemas: installing Debian's nodejs and npm"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
stamp=node_modules/.autobatch-installed
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "crd-schemas: npm ci (kubernetes-models: gateway-api, istio, prometheus-operator)"
  # The packages declare node >= 22; their validators run on the node 20 here.
  npm ci --no-audit --no-fund --loglevel=error 2>&1 | grep -v EBADENGINE || true
  [ -d node_modules/@kubernetes-models/gateway-api ] || { echo "crd-schemas: npm ci failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
