# Two commands matter: `make test` and `make serve` (a broker on localhost:9092, data in ./var).
# Both build the virtualenv themselves, so a fresh machine needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test bench bench-tools lint serve clean kcat browser demo chaos simulate cluster

# '.[dev,spark]': the Spark connector's tests run in `make test`. editable_mode=compat puts
# the checkout on sys.path, so Spark's static discovery of top-level pyspark_* modules
# (pkgutil.iter_modules) finds pyspark_odradek in an editable install.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==24.3.1
	$(BIN)/pip install --quiet -e '.[dev,spark]' --config-settings editable_mode=compat
	touch $(STAMP) $(SERVE_STAMP)

# `make serve` needs only the broker's own dependencies (tens of MB, not the ~1 GB of
# Spark and the test clients); a venv that `make test` set up already has them.
SERVE_STAMP := $(VENV)/.installed-serve
$(SERVE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==24.3.1
	$(BIN)/pip install --quiet -e . --config-settings editable_mode=compat
	touch $(SERVE_STAMP)

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

# Debian's chromium and chromium-driver for the console's browser test
# (tests/console/test_browser.py, driven by selenium from the dev extra), installed like
# kcat; without them that test is skipped (and says so).
browser:
	@test -x /usr/bin/chromedriver -a -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
	  export DEBIAN_FRONTEND=noninteractive; PKGS="chromium chromium-driver"; \
	  $$SUDO apt-get install -y -qq $$PKGS >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq >/dev/null 2>&1 && \
	    $$SUDO apt-get install -y -qq $$PKGS >/dev/null 2>&1; } || \
	  echo "make: could not install chromium; the console's browser test will be skipped" >&2; }

test: $(STAMP) kcat browser
	$(BIN)/python -m pytest -q --durations=30

# bench/broker.py compares odradek with librdkafka's mock cluster, a few lines of C
# built against Debian's librdkafka-dev (installed here like kcat; without it the mock
# column is skipped), and profiles the broker with py-spy (into the venv only).
bench-tools:
	@command -v gcc >/dev/null 2>&1 && pkg-config --exists rdkafka 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
	  export DEBIAN_FRONTEND=noninteractive; PKGS="librdkafka-dev pkg-config gcc libc6-dev"; \
	  $$SUDO apt-get install -y -qq $$PKGS >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq >/dev/null 2>&1 && \
	    $$SUDO apt-get install -y -qq $$PKGS >/dev/null 2>&1; } || \
	  echo "make: could not install librdkafka-dev; bench/broker.py skips the mock cluster" >&2; }
	@test -x $(BIN)/py-spy || $(BIN)/pip install --quiet py-spy==0.4.3 || \
	  echo "make: could not install py-spy; bench/broker.py skips its profile" >&2

bench: $(STAMP) bench-tools
	$(BIN)/python bench/run.py

# The crash harness of tests/chaos for many cycles (tests/chaos/test_chaos.py runs a short
# one in `make test`): kills, pauses and restarts one broker under an idempotent producer
# and a committing group, then prints a table and PASS/FAIL. CHAOS_SEED=N replays a fault
# schedule; CHAOS_ARGS='--cycles 100 --rate 5000' changes the run. CHAOS_ARGS='--quorum
# --cycles 40' runs it on three KRaft nodes instead (tests/chaos/quorum.py): faults on one
# or two nodes at once, the active controller among them, under an admin client creating
# and deleting topics beside the idempotent producer. CHAOS_ARGS='--replication' runs
# partition replication's harness (tests/chaos/replication.py): three KRaft nodes behind
# TCP proxies (tests/support/netproxy.py) so links between nodes can be cut, a topic with
# RF=3 and min.insync.replicas=2, 10 x 120 s runs for each fault mix (kill, pause,
# partition, mixed; --mix, --runs, --duration change that), then a table of acknowledged,
# lost, duplicated and inconsistent records and whether the replicas ended byte-identical.
# CHAOS_ARGS='--transactions' runs the transactional harness (tests/chaos/transactions.py)
# on the same proxied cluster: transactional producers committing and aborting (values
# name their transaction and intended outcome; --producers, --abort-ratio), a
# read_committed reader, faults on partition leaders and the transaction coordinator;
# then no aborted record read under read_committed, no committed transaction partly
# visible, every acknowledged commit fully visible (tests/chaos/txn_checks.py), with
# --mix, --runs and --duration as for --replication.
CHAOS_ARGS ?= --cycles 60
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos.run $(CHAOS_ARGS)

# The seeded KRaft simulation (tests/raft/simulation.py) over many seeds: partitions,
# drops, duplicates, crashes with honest fsync, skewed clocks and snapshots, with the
# safety invariants checked after every step. SEED=N VOTERS=V replays one failing run.
SEEDS ?= 1000
simulate: $(STAMP)
	$(BIN)/python -m tests.raft.simulate --seeds $(SEEDS) $(if $(SEED),--seed $(SEED)) $(if $(VOTERS),--voters $(VOTERS))

lint: $(STAMP)
	$(BIN)/ruff check odradek tests bench
	$(BIN)/ruff format --check odradek tests bench
	$(BIN)/mypy

# `make serve PORT=9093` listens elsewhere; `make serve ARGS='--config config/server.properties'`
# passes any `odradek serve` arguments (ARGS='--help' lists them).
PORT ?=
ARGS ?=
serve: $(SERVE_STAMP)
	$(BIN)/odradek serve $(if $(PORT),--listen localhost:$(PORT)) $(ARGS)

# Three combined KRaft nodes from config/cluster/node{1,2,3}.properties (brokers on
# localhost:9092-9094, controllers on 19093-19095, data in var/cluster/nodeN), formatted
# once with one cluster id; prints the bootstrap string and stops all three on Ctrl-C.
# CLUSTER_ARGS='--port 29092 --controller-port 29192 --data-dir var/c2' moves them.
CLUSTER_ARGS ?=
cluster: $(SERVE_STAMP)
	$(BIN)/odradek cluster $(CLUSTER_ARGS)

# The Spark pipeline of examples/clickstream end to end: a broker on an ephemeral port
# (data in var/demo, stopped by pid at the end), the click generator and the Structured
# Streaming job on local[2]; prints the job's progress, then the top pages.
demo: $(STAMP)
	$(BIN)/python examples/clickstream/demo.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
