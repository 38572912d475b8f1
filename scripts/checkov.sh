#!/usr/bin/env bash
# checkov (PyPI), the static scanner tests/unit/test_deploy.py runs on every rendered
# overlay. In its own venv: its ~100 dependencies must not move the project's pins.
# Installed once per pinned version.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=3.3.30
VENV=.venv-checkov
stamp="$VENV/.autobatch-installed"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$VERSION" ]; then
  echo "checkov: installing checkov==$VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "checkov==$VERSION" 2>&1 | grep -v "^WARNING: Location" || true
  "$VENV/bin/checkov" --version >/dev/null || { echo "checkov: install failed" >&2; exit 1; }
  echo "$VERSION" > "$stamp"
fi
