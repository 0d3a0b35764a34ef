# Two commands matter: `make test` and `make serve` (a broker on localhost:9092, data in ./var).
# Both build the virtualenv themselves, so a fresh machine needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test bench lint serve clean kcat

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==24.3.1
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# kcat (Debian's package) for tests/interop: installed once, quietly, as root or with
# sudo; `apt-get update` only if the first install attempt fails. Without it the kcat
# interop tests are skipped (and say so).
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $$SUDO apt-get install -y -qq kcat >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq >/dev/null 2>&1 && \
	    $$SUDO apt-get install -y -qq kcat >/dev/null 2>&1; } || \
	  echo "make: could not install kcat; its interop tests will be skipped" >&2; }

test: $(STAMP) kcat
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/run.py

lint: $(STAMP)
	$(BIN)/ruff check odradek tests bench
	$(BIN)/ruff format --check odradek tests bench
	$(BIN)/mypy

serve: $(STAMP)
	$(BIN)/odradek serve

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
