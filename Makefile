# Tasks a contributor runs; .ci/run runs `make check`'s steps on a clean clone.
.PHONY: check lint test fmt golden

check: lint test

lint:
	ruff check .
	ruff format --check .
	mypy

test:
	HF_HUB_OFFLINE=1 python -m pytest -q

fmt:
	ruff check --fix .
	ruff format .

golden:
	python -m pytest -q tests/test_golden_reports.py tests/test_rule_snapshots.py tests/test_rule_docs.py --update-golden
