#!/usr/bin/env bash
# The README's test command (`make test`) and what CI runs through .ci/run:
# system packages, the dev venv, the CRD schemas, checkov, a core-only install from the
# image's hash-locked requirements (and the container image's command run from it), lint
# and layer contracts, the README's results table against benchmarks/results/,
# docs/policy.md's rule table, mypy, the test suite. The image itself is built and run by
# `make image-test` (docs/deploy.md says why it is not here).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/setup.sh
scripts/crd-schemas.sh
scripts/checkov.sh
scripts/check-core-install.sh
.venv/bin/hadolint --failure-threshold style Dockerfile
.venv/bin/ruff check src tests benchmarks
.venv/bin/lint-imports   # the layers of docs/architecture.md, as contracts in pyproject.toml
.venv/bin/python benchmarks/report.py --check   # the README's results table matches benchmarks/results/
.venv/bin/python scripts/rule_table.py --check   # docs/policy.md's rule table matches policy.rules.RULES
.venv/bin/mypy   # policy/ strictly, and its callers (a Window is an Observation): [tool.mypy] in pyproject.toml
# Unit tests first (pure, on both cores); then the real servers, three test files at a time
# (most of their time is spent waiting on paced load, not computing); then, alone, the few
# tests that compare measured latency with a prediction (marked serial).
pytest=(.venv/bin/pytest -q -p no:cacheprovider)
"${pytest[@]}" -n 2 tests/unit "$@"
"${pytest[@]}" -n 3 --dist loadfile -m "not serial" tests/integration "$@"
# The serial tests compare measured latency tails with a prediction, which a scheduler
# stall on a shared VM can move; a failure runs them once more (why, with the figures:
# docs/planner.md, "How close the simulator comes").
if ! "${pytest[@]}" -m serial tests/integration "$@"; then
  echo "test: the serial latency-fidelity tests failed once; running them again (scripts/test.sh)" >&2
  "${pytest[@]}" -m serial tests/integration "$@"
fi
