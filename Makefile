# Two commands set everything up on a fresh machine with Python 3.11:
#   make reproduce   the full reproduction on params.yaml (snakemake --cores all in .venv)
#   make test        the test suite
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
RUN := PATH="$(CURDIR)/$(BIN):$$PATH" MLFLOW_DISABLE_TELEMETRY=true DVC_NO_ANALYTICS=1

.PHONY: setup reproduce study smoke test benchmark report mlflow-ui schema clean

$(BIN)/.installed: pyproject.toml requirements.lock
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (set PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

setup: $(BIN)/.installed

reproduce: setup
	$(RUN) snakemake --cores all

# the study (configs/study.yaml) writes to results/ like any parameter set; a copy of what it gathers across runs
# is kept in results/study/ (committed), since the next `make reproduce` puts the default run's back
STUDY_RESULTS := claims.md claims.json figures geometry/summary.csv sweep/summary.csv train/*/seed_*/metrics.json \
                 sample/*/seed_*/summary.csv surrogates/recovery.csv surrogates/layer_r2.csv \
                 distill/*/seed_*/phases.json distill/*/seed_*/k_*/evaluation.json

study: setup
	$(RUN) snakemake --cores all --configfile configs/study.yaml
	rm -rf results/study
	cd results && for path in $(STUDY_RESULTS); do mkdir -p study/$$(dirname $$path) && cp -r $$path study/$$path; done

smoke: setup
	$(RUN) snakemake --cores all --configfile configs/smoke.yaml

test: setup
	$(RUN) pytest -q

benchmark: setup
	$(RUN) python -m twoscale benchmark

report: setup
	$(RUN) snakemake --report report.html

mlflow-ui: setup
	$(RUN) mlflow ui --backend-store-uri sqlite:///mlflow.db --default-artifact-root ./mlartifacts

schema: setup
	$(RUN) python -m twoscale schema

clean:
	rm -rf data/raw data/prepared results/train/*/seed_*/checkpoints results/train/*/seed_*/history.parquet \
	       results/.resume results/benchmarks logs .snakemake mlflow.db mlartifacts report.html
