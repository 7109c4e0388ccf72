"""The same numbers as other projects' own code: the peers' scripts (Cherry_LLM, Superfiltering,
OpenDataArena, DEITA, apricot, submodlib), run unmodified on the same rows and model, the
``information-parity`` package, lm-evaluation-harness's ``hf`` model and vLLM's IFEval run."""
