"""Our scores inside other tools: :mod:`hf_adapters.integrations.lm_eval_harness` (lm-evaluation-harness),
:mod:`hf_adapters.integrations.lighteval_model` (lighteval; the request logic both share:
:mod:`hf_adapters.integrations.harness_requests`),
:mod:`hf_adapters.integrations.evaluate_modules` (the base of the evaluate modules in ``metrics/``, which
:mod:`hf_adapters.integrations.metric_paths` finds) and
:mod:`hf_adapters.integrations.module_widget` (their Space's form); in data pipelines,
:mod:`hf_adapters.integrations.datatrove_steps` (datatrove) and :mod:`hf_adapters.integrations.nemo_curator_stage`
(NeMo Curator), both on :mod:`hf_adapters.integrations.pipeline_scores`."""
