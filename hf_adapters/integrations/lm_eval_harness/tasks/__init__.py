"""Our lm-evaluation-harness tasks: pass :data:`TASKS_DIR` to lm-eval's ``--include_path``
(``python -m hf_adapters.integrations.lm_eval_harness.tasks`` prints it)."""

from pathlib import Path

#: The folder of the task folders (``information_parity/``), for ``--include_path``.
TASKS_DIR = Path(__file__).resolve().parent
