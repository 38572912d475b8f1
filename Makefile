# The two entry points of the README. Each installs what it needs first.
.PHONY: demo test setup lint bench

setup:
	@scripts/setup.sh

demo: setup
	.venv/bin/autobatch demo

test:
	@scripts/test.sh

lint: setup
	.venv/bin/ruff check src tests benchmarks

bench: setup
	.venv/bin/python benchmarks/run_all.py
