"""How fast: each score against what a user would otherwise run, score sets, the curator's recipe,
busy neighbours, two-model scores, the vLLM backend and IFEval generation."""
