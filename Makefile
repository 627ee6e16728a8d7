# Two entry points (see README): `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test test-postgres lint bench clean

# every feature extra, for the tests that exercise them
EXTRAS := middleware,lifecycle,server,ollama,compare,redis

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# the package with its extras and the evaluation package beside it (bench/, `pacms-bench`), plus
# the dev tools of pyproject's [dependency-groups] (pytest, hypothesis, langchain-tests, ruff,
# mypy); `--group` needs pip >= 25.1, hence the upgrade
$(VENV)/.installed: $(BIN)/python pyproject.toml bench/pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]" -e ./bench --group dev
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/pacms demo

lint: install
	$(BIN)/ruff check langchain_pacms tests bench benchmarks examples
	$(BIN)/ruff format --check langchain_pacms tests bench benchmarks examples
	$(BIN)/mypy

test: install lint
	$(BIN)/python -m pytest -q

# the sidecar-store tests against a throwaway PostgreSQL (what .ci/run starts before `make test`)
test-postgres: install
	bash -c 'source .ci/postgres.sh && $(BIN)/python -m pytest -q tests/integration_tests/test_persistent_sidecars.py tests/integration_tests/test_sidecar_backends.py'

bench: install
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
