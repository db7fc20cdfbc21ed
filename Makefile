# Set-up and the two everyday commands. Both work on a fresh machine with only Python 3
# and the package registries: the venv is created and filled on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install etcd lint ratchet test test-fast run bench mutate clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,server,yaml,serving]'
	touch $(STAMP)

install: $(STAMP)

# the etcd server the fleet tests and benchmark start their own copies of (Debian's etcd-server);
# installed when missing and we are root, else the fleet tests skip and say why
etcd:
	@command -v etcd >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null; \
	  else echo "make etcd: no etcd binary and not root -- install etcd-server (the fleet tests skip without it)"; fi; }
	@command -v etcd >/dev/null 2>&1 && etcd --version | head -1 || true

lint: install
	$(BIN)/ruff check sgconf runtime mem_cache attention engine tools tests benchmarks examples
	$(BIN)/ruff format --check sgconf runtime mem_cache attention engine tools tests benchmarks examples
	$(BIN)/mypy sgconf runtime mem_cache attention engine tools
	cd examples/minirt && ../../$(BIN)/mypy minirt

ratchet: install
	$(BIN)/sgconf-ratchet check
	$(BIN)/sgconf-ratchet unread
	cd examples/minirt && ../../$(BIN)/sgconf-ratchet check

# two workers: the process and server tests wait on their children, so the suite runs in
# about half the time on a 2-core machine; each worker publishes its own contexts
test: lint ratchet etcd
	$(BIN)/python -m pytest -q -n 2 --dist worksteal

# the tests that start no process, server or replica group: a quick loop while editing
test-fast: install
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not slow"

run: install
	$(BIN)/sgconf serve

# the peers bench_peers.py measures against (the `bench` extra), installed once on top of the usual set
$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,server,yaml,serving,bench]'
	touch $@

bench: install etcd $(VENV)/.bench-installed
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# mutation testing of the modules in mutation.toml (not part of `make test`); MODULES=path.py limits it
mutate: install
	$(BIN)/python -m tools.mutation $(MODULES)

clean:
	rm -rf $(VENV) .sgconf-ratchet-cache build *.egg-info
