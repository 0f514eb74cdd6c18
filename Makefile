# Two commands: `make demo` (everything up on this machine) and `make test` (the whole suite).
# SQLite by default; set DATABASE_URL=postgres://... to use PostgreSQL.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# What `make demo` needs (the runtime), and on top of it what the tests and linters need.
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# The demo's ports (demo/envfile.py has the defaults). One given here, as `make demo WEB_PORT=8101`
# or in the environment, wins and is saved in var/demo.env; one not given keeps the previous run's.
DEMO_PORTS := WEB_PORT PROVIDER_PORT CALLBACK_PORT PAGERDUTY_PORT SLACK_PORT TEAMS_PORT
DEMO_GIVEN := $(foreach p,$(DEMO_PORTS),$(if $(filter command line environment,$(origin $(p))),$(p)=$($(p))))
DEMO_STARTED_AT := $(shell date +%s)
PYTEST_ARGS ?=

.PHONY: demo demo-reset test screenshots lint bench soak soak-short chaos chaos-short chaos-direct chaos-direct-short failover failover-short clean venv

$(STAMP): pyproject.toml
	@echo "Installing pollerdash into $(VENV) (log: var/install.log)"
	@mkdir -p var
	@$(PYTHON) -m venv $(VENV)
	@{ $(BIN)/python -m pip install --upgrade pip && $(BIN)/python -m pip install -e .; } \
	  > var/install.log 2>&1 || { tail -n 40 var/install.log; exit 1; }
	@touch $(STAMP)

$(DEV_STAMP): $(STAMP) pyproject.toml
	@echo "Installing the test and lint tools into $(VENV) (log: var/install-dev.log)"
	@$(BIN)/python -m pip install -e '.[dev]' > var/install-dev.log 2>&1 || { tail -n 40 var/install-dev.log; exit 1; }
	@touch $(DEV_STAMP)

venv: $(DEV_STAMP)

# var/demo.env is rewritten at every run (ports, the URLs made from them; secrets kept); the demo's
# own process (`manage.py demo --serve` in the Procfile) seeds once the web answers and prints the
# URL and the logins. demo/launch.py runs the Procfile so Ctrl-C stops everything cleanly. The profiles are
# re-pointed at this run's provider port before any process starts (and runs the start-up checks).
demo: $(STAMP)
	@$(BIN)/python -m demo.envfile var/demo.env $(DEMO_GIVEN)
	@set -a && . ./var/demo.env && set +a && \
	  $(BIN)/python manage.py migrate --no-input -v 0 --skip-checks && \
	  $(BIN)/python manage.py collectstatic --no-input -v 0 --skip-checks && \
	  $(BIN)/python manage.py demo --profiles-only --provider-url "http://127.0.0.1:$$PROVIDER_PORT" --skip-checks && \
	  { [ -f "$$AUDIT_SIGNING_KEY_FILE" ] || { $(BIN)/python manage.py audit_keys --generate "$$AUDIT_SIGNING_KEY_FILE" \
	    > /dev/null && echo "created the demo's audit signing key, $$AUDIT_SIGNING_KEY_FILE"; }; } && \
	  echo "starting pollerdash on $$SITE_URL: the logins follow once it answers (Ctrl-C stops everything)" && \
	  DEMO_STARTED_AT=$(DEMO_STARTED_AT) PATH="$(CURDIR)/$(BIN):$$PATH" exec $(BIN)/python -m demo.launch Procfile

# Start the demo again from an empty database (its SQLite file only; the settings and keys stay).
demo-reset:
	@if [ -n "$$DATABASE_URL" ]; then \
	  echo "make demo-reset removes the demo's own SQLite database; DATABASE_URL names another: drop and recreate it yourself"; \
	  exit 2; fi
	@rm -f var/pollerdash.sqlite3 var/pollerdash.sqlite3-wal var/pollerdash.sqlite3-shm var/demo-agent-token
	@rm -rf var/mail
	@echo "demo data removed"
	@$(MAKE) --no-print-directory demo

test: $(DEV_STAMP)
	SECRET_KEY=test-only-not-secret $(BIN)/python -m pytest $(PYTEST_ARGS)

# The README's pictures (docs/img/), taken by a browser test from the demo's own scenarios.
screenshots: $(DEV_STAMP)
	README_SCREENSHOTS=1 SECRET_KEY=test-only-not-secret $(BIN)/python -m pytest -q tests/browser/test_readme_screenshots.py

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	SECRET_KEY=lint $(BIN)/mypy
	SECRET_KEY=lint $(BIN)/python manage.py makemigrations --check --dry-run

# Benchmarks print figures (they assert nothing); each uses its own scratch PostgreSQL database.
bench: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/controller.py
	SECRET_KEY=bench $(BIN)/python bench/dispatch.py
	SECRET_KEY=bench $(BIN)/python bench/audit.py
	SECRET_KEY=bench $(BIN)/python bench/api.py
	SECRET_KEY=bench $(BIN)/python bench/mcp.py
	SECRET_KEY=bench $(BIN)/python bench/dashboard.py
	SECRET_KEY=bench $(BIN)/python bench/retention.py

# The soak with faults: 10 minutes on a private PostgreSQL cluster it starts (initdb as postgres).
# Exits 1 when an invariant is not 0; a failing run's logs stay under var/soak/<time>/.
soak: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/soak.py

# CI's form: 3,000 operations over 2 minutes, a worker killed every 15 s, PostgreSQL restarted once
# (about 3 minutes in all).
soak-short: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/soak.py --short

# The fault run of the production topology (bench/chaos.py): two hosts, two web processes and the
# signer through PgBouncer on a private primary and synchronous replica; SIGKILLs, a partition, a
# primary failover, a PgBouncer restart, people deciding throughout. Exits 1 when an invariant is
# not 0; chaos-short is CI's form (about 5 minutes).
chaos: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/chaos.py

chaos-short: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/chaos.py --short

# The same fault run with every process straight to PostgreSQL on a multi-host URL (no PgBouncer).
chaos-direct: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/chaos.py --direct

chaos-direct-short: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/chaos.py --direct --short

# A primary failover under load (bench/failover.py): two PostgreSQL 15 clusters made for the run
# (pg_createcluster, a synchronous replica by pg_basebackup -R; run as root), the primary SIGKILLed
# and the replica promoted; dropped at the end. Exits 1 when an invariant is not 0.
failover: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/failover.py

failover-short: $(DEV_STAMP)
	SECRET_KEY=bench $(BIN)/python bench/failover.py --short

clean:
	rm -rf $(VENV) var
