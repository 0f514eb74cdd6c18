# Two commands: `make demo` (everything up on this machine) and `make test` (the whole suite).
# SQLite by default; set DATABASE_URL=postgres://... to use PostgreSQL.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WEB_PORT ?= 8000
PROVIDER_PORT ?= 8765
# Where a callback receiver you start for the demo listens: the only local port callbacks may reach.
CALLBACK_PORT ?= 8766
PYTEST_ARGS ?=

.PHONY: demo test lint bench soak soak-short clean venv

$(STAMP): pyproject.toml
	@echo "Installing pollerdash into $(VENV) (log: var/install.log)"
	@mkdir -p var
	@$(PYTHON) -m venv $(VENV)
	@{ $(BIN)/python -m pip install --upgrade pip && $(BIN)/python -m pip install -e '.[dev]'; } \
	  > var/install.log 2>&1 || { tail -n 40 var/install.log; exit 1; }
	@touch $(STAMP)

venv: $(STAMP)

var/demo.env:
	@mkdir -p var
	@printf '%s\n' \
	  'DEBUG=1' \
	  'SITE_URL=http://127.0.0.1:$(WEB_PORT)' \
	  'WEB_PORT=$(WEB_PORT)' \
	  'PROVIDER_PORT=$(PROVIDER_PORT)' \
	  "PROVIDER_FAKE_TOKEN=demo-$$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
	  'AUDIT_SIGNING_KEY_FILE=var/audit-signing-key.pem' \
	  'CALLBACK_ALLOWED_HOSTS=127.0.0.1:$(CALLBACK_PORT),localhost:$(CALLBACK_PORT)' \
	  'NOTIFY_EMAILS=oncall@example.invalid' \
	  'EMAIL_BACKEND=escalations.mailfiles.EmailBackend' \
	  'EMAIL_FILE_PATH=var/mail' \
	  'Q_WORKERS=2' > $@

# Credential variables carry the PROVIDER_ prefix: an older var/demo.env is renamed in place. Mail
# goes to files under var/mail with one line printed per message (an older var/demo.env gains it),
# so the one-time logins stay on screen.
demo: $(STAMP) var/demo.env
	@sed -i 's/^FAKE_PROVIDER_TOKEN=/PROVIDER_FAKE_TOKEN=/' var/demo.env
	@grep -q '^EMAIL_BACKEND=' var/demo.env || \
	  printf '%s\n' 'EMAIL_BACKEND=escalations.mailfiles.EmailBackend' 'EMAIL_FILE_PATH=var/mail' >> var/demo.env
	@set -a && . ./var/demo.env && set +a && \
	  $(BIN)/python manage.py migrate --no-input -v 0 && \
	  $(BIN)/python manage.py collectstatic --no-input -v 0 && \
	  { [ -z "$$AUDIT_SIGNING_KEY_FILE" ] || [ -f "$$AUDIT_SIGNING_KEY_FILE" ] || \
	    $(BIN)/python manage.py audit_keys --generate "$$AUDIT_SIGNING_KEY_FILE"; } && \
	  $(BIN)/python manage.py demo --provider-url http://127.0.0.1:$(PROVIDER_PORT) && \
	  echo "pollerdash is starting: open http://127.0.0.1:$(WEB_PORT)/ (Ctrl-C stops everything)" && \
	  PATH="$(CURDIR)/$(BIN):$$PATH" exec $(BIN)/honcho start -f Procfile -e var/demo.env

test: $(STAMP)
	SECRET_KEY=test-only-not-secret $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	SECRET_KEY=lint $(BIN)/mypy
	SECRET_KEY=lint $(BIN)/python manage.py makemigrations --check --dry-run

# Benchmarks print figures (they assert nothing); each uses its own scratch PostgreSQL database.
bench: $(STAMP)
	SECRET_KEY=bench $(BIN)/python bench/controller.py
	SECRET_KEY=bench $(BIN)/python bench/dispatch.py
	SECRET_KEY=bench $(BIN)/python bench/audit.py
	SECRET_KEY=bench $(BIN)/python bench/api.py
	SECRET_KEY=bench $(BIN)/python bench/dashboard.py
	SECRET_KEY=bench $(BIN)/python bench/retention.py

# The soak with faults: 10 minutes on a private PostgreSQL cluster it starts (initdb as postgres).
# Exits 1 when an invariant is not 0; a failing run's logs stay under var/soak/<time>/.
soak: $(STAMP)
	SECRET_KEY=bench $(BIN)/python bench/soak.py

# CI's form: 3,000 operations over 2 minutes, a worker killed every 15 s, PostgreSQL restarted once
# (about 3 minutes in all).
soak-short: $(STAMP)
	SECRET_KEY=bench $(BIN)/python bench/soak.py --short

clean:
	rm -rf $(VENV) var
