#!/usr/bin/env bash
# `import autobatch` and `autobatch --help` must work with the core dependencies
# only: no torch, no nvidia-pytriton. Checked in a throwaway venv installed as the image
# is: deploy/image/requirements.lock with --require-hashes (every package pinned and its
# file's hash checked), then autobatch itself without dependencies. The venv then runs
# the container image's command against the layout deploy/k8s mounts.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --require-hashes -r deploy/image/requirements.lock 2>&1 \
  | grep -v "^WARNING: Location" || true
"$tmp/venv/bin/python" -m pip install -q --no-deps . 2>&1 | grep -v "^WARNING: Location" || true
"$tmp/venv/bin/python" - <<'PY'
import importlib.util, sys
for absent in ("torch", "pytriton"):
    assert importlib.util.find_spec(absent) is None, f"{absent} leaked into the core install"
import autobatch
print(f"core install: import autobatch {autobatch.__version__} ok without torch and nvidia-pytriton, "
      "from deploy/image/requirements.lock (--require-hashes)")
PY
"$tmp/venv/bin/autobatch" --help >/dev/null
echo "core install: autobatch --help ok"
# The container image's command (Dockerfile ENTRYPOINT + CMD) from this core-only
# install, against the files the reload overlay mounts; SIGTERM must end it with 0.
.venv/bin/python scripts/check_image_command.py "$tmp/venv/bin"
