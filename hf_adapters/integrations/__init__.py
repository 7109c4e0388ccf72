"""Our scores inside other tools: :mod:`hf_adapters.integrations.lm_eval_harness` (lm-evaluation-harness)."""
