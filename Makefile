# Two commands matter: `make test` and (with the broker issue) `make serve`.
# Both build the virtualenv themselves, so a fresh machine needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test bench lint serve clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==24.3.1
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/run.py

lint: $(STAMP)
	$(BIN)/ruff check odradek tests bench
	$(BIN)/ruff format --check odradek tests bench
	$(BIN)/mypy

serve: $(STAMP)
	@echo "odradek serve arrives with the broker (issue 3); nothing to run yet." >&2
	@exit 2

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
