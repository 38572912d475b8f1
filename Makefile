# The two entry points of the README. Each installs what it needs first.
.PHONY: demo test test-unit setup lint bench results image image-test

setup:
	@scripts/setup.sh

demo: setup
	.venv/bin/autobatch demo

test:
	@scripts/test.sh

test-unit: setup
	.venv/bin/pytest -q -p no:cacheprovider -n 2 tests/unit

lint: setup
	.venv/bin/ruff check src tests benchmarks

bench: setup
	.venv/bin/python benchmarks/run_all.py

results: setup
	.venv/bin/python benchmarks/report.py

# The sidecar image, built with podman on a local Debian base (scripts/image.sh).
image:
	@scripts/image.sh

# The image built, then run beside the real Triton (tests/image/test_image.py).
image-test: setup
	tag=$$(scripts/image.sh) && AUTOBATCH_IMAGE=$$tag .venv/bin/pytest -q -p no:cacheprovider -rP tests/image
