#!/usr/bin/env bash
# Rewrite the image's locks from PyPI, with every file's hash (pip-compile --generate-hashes):
#   deploy/image/requirements.lock  the core dependencies of pyproject.toml (what the image runs)
#   deploy/image/build.lock         setuptools and wheel (what builds autobatch's own wheel)
# The Dockerfile installs both with --require-hashes; scripts/check-core-install.sh installs
# requirements.lock in a clean venv on every `make test`. Run this to move a pin, then
# `make test` and `make image-test`. Needs PyPI; takes a few minutes (every file's hash).
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools"
"$tools/bin/pip" install -q "pip-tools==7.6.2" 2>&1 | grep -v "^WARNING: Location" || true
# PyPI alone, whatever this machine's pip.conf adds (local mirrors, find-links, constraints):
# the image builds from PyPI.
compile=(env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null "$tools/bin/pip-compile" -q
         --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links
         --index-url https://pypi.org/simple)
"${compile[@]}" --output-file deploy/image/requirements.lock pyproject.toml
"${compile[@]}" --output-file deploy/image/build.lock deploy/image/build.in
echo "lock-image: wrote deploy/image/requirements.lock and deploy/image/build.lock"
