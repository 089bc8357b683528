# Two commands set everything up on a fresh machine with Python 3.11 or 3.12:
#   make reproduce   the full reproduction on params.yaml (snakemake --cores all in .venv)
#   make test        the test suite but its slow tests (make test-all: every test, as CI runs it)
# On a GPU machine: make setup TORCH=system reuses the Python's own (CUDA) torch; make gpu runs configs/gpu.yaml
SHELL := /bin/bash
PYTHON ?= $(or $(shell command -v python3.11),$(shell command -v python3.12),python3.11)
VENV ?= .venv
BIN := $(VENV)/bin
RUN := PATH="$(CURDIR)/$(BIN):$$PATH" MLFLOW_DISABLE_TELEMETRY=true DVC_NO_ANALYTICS=1

.PHONY: setup setup-cluster reproduce push pull study study-copy study-round run-copy deep screen screen-candidate smoke gpu test test-all benchmark report mlflow-ui schema workflow clean

# TORCH=system: reuse the torch that $(PYTHON) already has (a CUDA build, say) instead of the lock's torch==2.13.0
TORCH ?= lock
ifeq ($(TORCH),system)
VENV_OPTIONS := --system-site-packages
else ifeq ($(TORCH),lock)
VENV_OPTIONS :=
else
$(error TORCH must be lock or system, got '$(TORCH)')
endif

$(BIN)/.installed: pyproject.toml requirements.lock
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (set PYTHON=/path/to/python3.11 or python3.12)"; exit 1; }
	@[ "$(TORCH)" = lock ] || $(PYTHON) -c "import torch" 2>/dev/null \
	  || { echo "error: TORCH=system, but $(PYTHON) cannot import torch"; exit 1; }
	$(PYTHON) -m venv $(VENV_OPTIONS) $(VENV)
	@[ "$(TORCH)" = lock ] || grep -v '^torch==' requirements.lock > $(VENV)/requirements-without-torch.txt
	$(BIN)/pip install --quiet --disable-pip-version-check \
	  -r $(if $(filter system,$(TORCH)),$(VENV)/requirements-without-torch.txt,requirements.lock)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	@$(BIN)/python -c "import torch; print('torch', torch.__version__, '(CUDA ' + torch.version.cuda + ')' if torch.version.cuda else '(CPU build)', 'GPU:', torch.cuda.get_device_name() if torch.cuda.is_available() else 'none')"
	@touch $@

setup: $(BIN)/.installed

# the cluster path: Snakemake's Slurm executor and PostgreSQL's driver for a shared MLflow server
setup-cluster: $(BIN)/.installed-cluster
$(BIN)/.installed-cluster: $(BIN)/.installed requirements-cluster.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-cluster.txt
	@touch $@

reproduce: setup
	$(RUN) snakemake --cores all
	@echo "The run's model weights, token arrays and corpus are in DVC's cache (.dvc/cache), its tables in git:"
	@echo "  make push    copies the cache to the DVC remote 'store' ($$($(RUN) dvc remote list | awk '$$1 == "store" {print $$2}'))"
	@echo "  make push DVC_REMOTE=s3://bucket/twoscale   the same, to another remote (docs/running.md#a-dvc-remote)"

# DVC's remote 'store' (.dvc/config: a folder beside the checkout, ../twoscale-dvc-store): DVC_REMOTE=<url> points
# it elsewhere for this checkout (.dvc/config.local) first. pull then marks the outputs current for Snakemake (its
# --touch: a clone's files carry the times of the checkout and the pull, not of the run)
DVC_REMOTE ?=
point-remote = $(if $(DVC_REMOTE),$(RUN) dvc remote modify --local store url '$(DVC_REMOTE)' &&)
push: setup
	$(point-remote) $(RUN) dvc push

pull: setup
	$(point-remote) $(RUN) dvc pull && $(RUN) snakemake --touch --cores 1 --quiet all

# the study (configs/study.yaml: params.yaml at three seeds) writes under runs/study/ like any parameter set but
# params.yaml; what git keeps of it (every output but the model weights, with its build records: every figure and
# claim of the study can be redrawn from the repository) is copied into results/study/ (committed), where the
# README's and the reproductions' comparisons read it. A study's claims read the committed study as their reference:
# a study made elsewhere is first read against the one it replaces (runs/study/against-the-replaced-study.md), then,
# copied, its claims are read against their own copy (no other draw of themselves: no comparison) and copied again,
# twice: the second round's build record names the copy it was read against, whose bytes it then has
study: reproduce
	$(RUN) python -m twoscale reuse --params configs/study.yaml  # the default run's jobs are the study's seed 1337's
	$(RUN) snakemake --cores all --configfile configs/study.yaml
	if [ -f results/study/claims.json ]; then $(RUN) python -m twoscale compare runs/study/results/claims.json \
	  results/study/claims.json --name "the study it replaces" > runs/study/against-the-replaced-study.md; fi
	$(MAKE) --no-print-directory study-copy
	$(MAKE) --no-print-directory study-round
	$(MAKE) --no-print-directory study-round
	$(RUN) snakemake --cores all --quiet  # the default run's claims, read against the study just copied

# the study's claims read against the copy just made, then copied (a line apart from $(MAKE): make -n runs such lines)
study-round:
	$(RUN) snakemake --cores all --configfile configs/study.yaml --quiet
	$(MAKE) --no-print-directory study-copy

study-copy:
	$(MAKE) --no-print-directory run-copy NAME=study
	{ printf '# The study\n\n`make study` on commit %s, finished %s UTC, on %s (%s CPUs); what computed each number ' \
	    "$$(git rev-parse HEAD)" "$$(date -u '+%F %H:%M')" "$$(lscpu | sed -n 's/^Model name: *//p')" "$$(nproc)"; \
	  printf '(processor, arithmetic, torch): claims.md, "What computed these numbers". Where the time went:\n\n'; \
	  printf 'the default run (seed 1337, whose jobs the study takes):\n\n```\n'; $(RUN) python -m twoscale cost; \
	  printf '```\n\nthe study:\n\n```\n'; $(RUN) python -m twoscale cost --params configs/study.yaml; \
	  printf '```\n'; } > results/study/README.md

# what git keeps of runs/$(NAME)/results (every output but the model weights, with its build records) copied into
# results/$(NAME)/, its claims' links to docs/ one folder up
run-copy:
	rm -rf results/$(NAME) && mkdir -p results/$(NAME)
	cd runs/$(NAME)/results && find . -type f ! -name '*.pt' ! -name '*.stat' ! -name '.*.tmp' ! -name '.*.old' \
	  ! -name '.*.landing.json' ! -path './benchmarks/*' -exec cp --parents --preserve=timestamps {} ../../../results/$(NAME)/ \;
	sed -i 's#](\.\./\.\./\.\./docs/#](../../docs/#g' results/$(NAME)/claims.md

# the deep parameter set (configs/deep.yaml: the depth screen's setting, one seed), copied into results/deep/ and its
# claims read against the committed study's (results/deep/against-the-study.md)
deep: setup
	$(RUN) snakemake --cores all --configfile configs/deep.yaml
	$(MAKE) --no-print-directory run-copy NAME=deep
	$(RUN) python -m twoscale compare results/deep/claims.json results/study/claims.json \
	  --name "the default parameters' study" > results/deep/against-the-study.md
	{ printf '# The deep parameter set\n\n`make deep` on commit %s, finished %s UTC, on %s (%s CPUs); what computed ' \
	    "$$(git rev-parse HEAD)" "$$(date -u '+%F %H:%M')" "$$(lscpu | sed -n 's/^Model name: *//p')" "$$(nproc)"; \
	  printf 'each number: claims.md, "What computed these numbers". Where the time went:\n\n```\n'; \
	  $(RUN) python -m twoscale cost --params configs/deep.yaml; printf '```\n'; } > results/deep/README.md

# the depth screen (docs/results.md#the-depth-screen-pre-registered-2026-11-29-before-any-candidate-trained): one
# candidate, configs/screen-$(NAME).yaml, trained and measured as far as the screen reads (under runs/screen-$(NAME)/);
# then the table and figure of every candidate run so far (results/screen/)
screen-candidate: setup
	$(RUN) snakemake --cores all runs/screen-$(NAME)/results/geometry/loss_vs_loops.parquet \
	  runs/screen-$(NAME)/results/surrogates/recovery.csv --configfile configs/screen-$(NAME).yaml
screen: setup
	$(RUN) python -m twoscale screen

smoke: setup
	$(RUN) snakemake --cores all --configfile configs/smoke.yaml

gpu: setup
	$(RUN) snakemake --profile profiles/gpu --cores all --configfile configs/gpu.yaml

# one worker per core; a module's tests share a worker (its fixtures), modules handed out in the order of
# tests/conftest.py (the longest first), not by their number of tests. `test` leaves out the slow tests (a model at
# the paper's shape, data at full size, workflows beyond the shared smoke run: docs/development.md#time-of-the-suite),
# `test-all` (CI) runs them too; both end with the 15 slowest tests' seconds
PYTEST := pytest -q -n auto --dist loadscope --no-loadscope-reorder --durations=15
test: setup
	$(RUN) $(PYTEST) -m "not slow and not cluster"

test-all: setup
	$(RUN) $(PYTEST)

benchmark: setup
	$(RUN) python -m twoscale benchmark

# Snakemake's report of a parameter set's run: report.html for params.yaml, runs/<name>/report.html for another
PARAMS ?= params.yaml
REPORT = $(if $(filter params.yaml,$(PARAMS)),report.html,runs/$(basename $(notdir $(PARAMS)))/report.html)
# Snakemake warns once per output it has no record of running (all of them in a fresh clone, whose committed run
# was made elsewhere): those lines become one saying how many outputs the report has no run statistics for
MISSING_METADATA := /^Missing metadata for file / { missing++; next } { print } END { if (missing) print missing " outputs have no run statistics in the report: Snakemake has no record of running them in this checkout" }
report: setup
	@set -o pipefail; $(RUN) snakemake --report $(REPORT) --configfile $(PARAMS) 2>&1 | awk '$(MISSING_METADATA)'

# the UI opens in its GenAI view unless asked for the model-training one: print the address of the runs table
MLFLOW_PORT ?= 5000
# MLflow's own defaults, 4 server processes and a job runner of 7 more, each loading MLflow, did not start on a busy
# 2-core machine (uvicorn restarts a worker that misses its health check while it loads): one process, no job runner
# (MLFLOW_JOBS=true starts it; the UI needs it only for MLflow's own scheduled jobs)
MLFLOW_WORKERS ?= 1
MLFLOW_JOBS ?= false
mlflow-ui: setup
	@$(RUN) python -c "import mlflow; e = mlflow.MlflowClient('sqlite:///mlflow.db').get_experiment_by_name('twoscale'); \
	  print('runs table: http://127.0.0.1:$(MLFLOW_PORT)/#/experiments/' + (e.experiment_id if e else '0') + '?workflowType=machine_learning')"
	$(RUN) MLFLOW_SERVER_ENABLE_JOB_EXECUTION=$(MLFLOW_JOBS) mlflow ui --backend-store-uri sqlite:///mlflow.db --default-artifact-root ./mlartifacts --port $(MLFLOW_PORT) \
	  --workers $(MLFLOW_WORKERS)

schema: setup
	$(RUN) python -m twoscale schema

workflow: setup
	$(RUN) python -m twoscale workflow

clean:
	rm -rf data/raw data/prepared results/train/*/seed_*/checkpoints results/train/*/seed_*/history.parquet \
	       results/.resume results/benchmarks logs runs .snakemake mlflow.db mlartifacts report.html
