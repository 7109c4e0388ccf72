"""Print the folder to pass to lm-eval's ``--include_path``."""

from hf_adapters.integrations.lm_eval_harness.tasks import TASKS_DIR

print(TASKS_DIR)
