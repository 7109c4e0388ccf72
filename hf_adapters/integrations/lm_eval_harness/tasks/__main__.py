"""Print the folder to pass to lm-eval's ``--include_path``."""

from . import TASKS_DIR

print(TASKS_DIR)
