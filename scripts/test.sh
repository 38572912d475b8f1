#!/usr/bin/env bash
# The README's test command (`make test`) and what CI runs through .ci/run:
# system packages, the dev venv, the CRD schemas, checkov, a core-only install from the
# image's hash-locked requirements (and the container image's command run from it), lint
# and layer contracts, the README's results table against benchmarks/results/,
# docs/policy.md's rule table, mypy, the test suite. The image itself is built and run by
# `make image-test` (docs/deploy.md says why it is not here).
set -euo pipefail
cd "$(dirname "$0")/.."
# The two installs that need only pip and a folder of their own (checkov's venv, the core-only
# venv) run beside the dev venv's install and the lint, not after them: on a fresh clone they
# were 60 s and 48 s of a run CI wants under 15 minutes. Each one's output is shown when it is
# waited for; a failure stops the run there with its exit status.
logs=$(mktemp -d)
declare -A pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$logs"' EXIT
begin() { local name=$1; shift; "$@" >"$logs/$name" 2>&1 & pids[$name]=$!; }
finish() {
  local name=$1 rc=0
  wait "${pids[$name]}" || rc=$?
  unset "pids[$name]"
  cat "$logs/$name"
  if [ "$rc" -ne 0 ]; then echo "test: $name failed (exit $rc)" >&2; exit "$rc"; fi
}
scripts/system-deps.sh
begin checkov scripts/checkov.sh
scripts/setup.sh
begin core-install scripts/check-core-install.sh   # its last step runs .venv's python
scripts/crd-schemas.sh
.venv/bin/hadolint --failure-threshold style Dockerfile
.venv/bin/ruff check src tests benchmarks
.venv/bin/lint-imports   # the layers of docs/architecture.md, as contracts in pyproject.toml
.venv/bin/python benchmarks/report.py --check   # the README's results table matches benchmarks/results/
.venv/bin/python scripts/rule_table.py --check   # docs/policy.md's rule table matches policy.rules.RULES
.venv/bin/mypy   # policy/ strictly, and its callers (a Window is an Observation): [tool.mypy] in pyproject.toml
# Unit tests first (pure, on both cores); then the real servers, three test files at a time
# (most of their time is spent waiting on paced load, not computing; the longest files first:
# LONGEST_FIRST in tests/integration/conftest.py); then, alone, the few
# tests that compare measured latency with a prediction (marked serial).
pytest=(.venv/bin/pytest -q -p no:cacheprovider)
finish checkov   # tests/unit/test_deploy.py runs it
"${pytest[@]}" -n 2 tests/unit "$@"
finish core-install
"${pytest[@]}" -n 3 --dist loadfile --no-loadscope-reorder -m "not serial" tests/integration "$@"
# The serial tests compare measured latency tails with a prediction, which a scheduler
# stall on a shared VM can move; a failure runs them once more (why, with the figures:
# docs/planner.md, "How close the simulator comes").
if ! "${pytest[@]}" -m serial tests/integration "$@"; then
  echo "test: the serial latency-fidelity tests failed once; running them again (scripts/test.sh)" >&2
  "${pytest[@]}" -m serial tests/integration "$@"
fi
