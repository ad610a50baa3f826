# `make repro` sets everything up on a fresh machine and runs the pipeline; `make test` runs the tests.
SHELL := /bin/bash
VENV := .venv
ENV := export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true NLTK_DATA="$${NLTK_DATA:-$(abspath ../shared/nltk_data)}" PATH="$(abspath $(VENV))/bin:$$PATH";

.PHONY: install repro test lint

$(VENV)/.installed: requirements.txt pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

install: $(VENV)/.installed

repro: install
	$(ENV) dvc repro

test: install
	$(ENV) ruff check src stages tests benchmarks && pytest -q

lint: install
	$(ENV) ruff check src stages tests benchmarks
