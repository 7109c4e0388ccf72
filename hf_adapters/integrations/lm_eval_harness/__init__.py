"""lm-evaluation-harness integration (needs ``pip install 'hf_adapters[lm-eval]'``): our backends as the
lm-eval model ``hf-adapters`` (:class:`HFAdaptersLM`), and our tasks (``tasks/``, for ``--include_path``)."""

from .model import HFAdaptersLM

__all__ = ["HFAdaptersLM"]
