# Wattlease: `make demo` runs the demo, `make test` runs every test. Both install what they
# need first (Debian packages via apt-get, a virtual environment from requirements.lock) and
# skip what is already installed, so a second run starts at once.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LOCK_HASH := $(shell sha256sum requirements.lock pyproject.toml | sha256sum | cut -c1-16)
VENV_STAMP := $(VENV)/.installed-$(LOCK_HASH)

# swtpm/tpm2-tools: the TPMs of simulated nodes; libtss2-dev + pkg-config + gcc: tpm2-pytss's
# build; postgresql/redis-server: the production-path services the tests start privately;
# chromium: the dashboard's browser tests; fonts-wqy-microhei: Chinese glyphs for the
# pages in Chinese it renders; gettext: compiling the pages' translations (webapp/locale,
# `make messages`); slurmctld/slurmd/slurmdbd/slurm-client/munge/mariadb-server: the Slurm
# cluster whose access control a lease is (the tests start one privately:
# scheduler/grants/local_cluster.py); golang-go is not listed (Go 1.26 ships with the
# machine image; Debian's is too old for Fabric 2.5).
SYSTEM_PACKAGES := swtpm swtpm-tools tpm2-tools libtss2-dev pkg-config gcc python3-venv \
	python3-dev postgresql redis-server chromium fonts-wqy-microhei gettext ca-certificates curl \
	slurmctld slurmd slurmdbd slurm-client munge mariadb-server

.PHONY: demo test setup system-packages lint check clean screenshots observability messages mutation

# `make demo LEDGER_BACKEND=fabric` runs the demo through a loopback Fabric network
demo: setup
	WATTLEASE_ENV=development $(PY) manage.py demo $(if $(LEDGER_BACKEND),--ledger $(LEDGER_BACKEND))

test: setup
	$(PY) -m tests.run_all

NODE_STAMP := bench/fabric-node/node_modules/.installed-$(shell sha256sum bench/fabric-node/package-lock.json | cut -c1-16)

AXE_STAMP := tests/webapp/axe/node_modules/.installed-$(shell sha256sum tests/webapp/axe/package-lock.json | cut -c1-16)

setup: system-packages $(VENV_STAMP) $(NODE_STAMP) $(AXE_STAMP)

# axe-core, pinned: the browser tests inject it into every console and operator page
$(AXE_STAMP): tests/webapp/axe/package-lock.json
	cd tests/webapp/axe && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# the official Node Fabric Gateway client: the reference the Python client is checked against
$(NODE_STAMP): bench/fabric-node/package-lock.json
	cd bench/fabric-node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "Installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing \
		|| { echo "apt-get failed: run 'make setup' as root on Debian 12"; exit 1; }; \
	fi
	@# Node.js: the machine's own if it has one (Debian's npm conflicts with other builds)
	@command -v npm >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }

$(VENV_STAMP): requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11"; exit 1; }
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "$(PYTHON) is older than 3.11"; exit 1; }
	rm -rf $(VENV) && $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	touch $@

# Prometheus, promtool and Jaeger (go install at pinned releases, cached under
# $${WATTLEASE_CACHE:-~/.cache/wattlease}; a second run finds the cache). `make test` runs it.
observability: setup
	$(PY) -m webapp.observability build

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The pages' translations: webapp/locale/<lang>/LC_MESSAGES/django.po holds them, the .mo
# beside it is committed (compiled here; a clean clone needs no gettext to run).
messages: setup
	WATTLEASE_ENV=development $(PY) manage.py makemessages -l zh_Hans --no-location \
		--no-obsolete --ignore 'tests/*' --ignore 'bench/*' --ignore 'docs/*' --ignore 'var/*' --ignore 'build/*'
	WATTLEASE_ENV=development $(PY) manage.py compilemessages -l zh_Hans --ignore 'build/*' --ignore '.venv/*'

# mutation testing of the contract's checks and the auditor ([tool.mutmut] in pyproject.toml):
# every mutant is run against the contract and adversarial tests; hours on a 2-core machine
# (docs/benchmarks.md, "Mutation testing"). `make mutation MUTANTS='ledger.audit.validity*'`
# runs a sample.
mutation: setup
	WATTLEASE_ENV=development $(VENV)/bin/mutmut run $(MUTANTS)
	$(VENV)/bin/mutmut results

# docs/screenshots/: the console and dashboards as the browser tests see them on the demo
screenshots: setup
	WATTLEASE_SCREENSHOTS=docs/screenshots $(PY) -m pytest -p no:cacheprovider -q \
		tests/webapp/console/test_console_browser.py

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache .mypy_cache mutants
