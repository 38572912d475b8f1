#!/usr/bin/env bash
# Create (or refresh) the project's virtualenv with every extra, idempotently.
# Used by `make demo`, `make test` and .ci/run. Torch comes from constraints.txt
# (the CPU build on this machine's disk), never a bare multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
stamp="$VENV/.autobatch-installed"
want=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing autobatch[triton,torch,plot,dev] into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e '.[triton,torch,plot,dev]' 2>&1 \
    | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -c "import autobatch, torch, pytriton" \
    || { echo "setup: install failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
