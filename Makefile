# `make repro` sets everything up on a fresh machine, pulls what a DVC remote holds and runs the
# pipeline; `make test` runs the tests.
SHELL := /bin/bash
VENV := .venv
ENV := export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true NLTK_DATA="$${NLTK_DATA:-$(abspath ../shared/nltk_data)}" PATH="$(abspath $(VENV))/bin:$$PATH";

.PHONY: install pull repro test lint

# pip compiles every installed file to bytecode on one core; compileall -j 0 does it on all. It
# exits 1 for files the venv's Python cannot compile (torch's py312 test helpers), as pip skips.
$(VENV)/.installed: requirements.txt pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt
	$(VENV)/bin/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

install: $(VENV)/.installed

# Where a DVC remote is configured, fetch what dvc.lock names before computing it; objects the
# remote lacks are skipped. A default remote that does not answer within seconds (offline, a
# missing folder, a silent server) is not pulled from, and that or a failed pull warns once and
# leaves the work to `dvc repro` (src/sentemb/remote.py).
pull: install
	$(ENV) python -m sentemb.remote pull

# `dvc repro` with a progress line per stage: stage k of N, elapsed, estimated time left.
repro: pull
	$(ENV) python -m sentemb.progress

test: install
	$(ENV) ruff check src stages tests benchmarks examples && pytest -q -n auto --dist loadscope --no-loadscope-reorder --durations=15

lint: install
	$(ENV) ruff check src stages tests benchmarks examples
