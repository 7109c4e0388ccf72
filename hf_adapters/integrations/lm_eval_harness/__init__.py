"""lm-evaluation-harness integration (needs ``pip install 'hf_adapters[lm-eval]'``): our backends as the
lm-eval model ``hf-adapters`` (:class:`HFAdaptersLM`), and our tasks (``tasks/``, for ``--include_path``)."""

from hf_adapters.integrations.lm_eval_harness.model import HFAdaptersLM

__all__ = ["HFAdaptersLM"]
