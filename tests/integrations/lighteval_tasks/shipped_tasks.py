"""lighteval tasks over the rows shipped in hf_adapters/data/sample.jsonl (read through this folder's
README.md, offline): a multiple choice, a generation and a perplexity, for ``--custom-tasks``."""

from pathlib import Path

from lighteval.metrics.metrics import Metrics
from lighteval.tasks.lighteval_task import LightevalTaskConfig
from lighteval.tasks.requests import Doc

DATA = str(Path(__file__).resolve().parent)


def choice_prompt(line: dict, task_name: str | None = None) -> Doc:
    """The row's own output first, then two fixed other answers."""
    return Doc(task_name=task_name, query=f"{line['instruction']}\nAnswer:", gold_index=0,
               choices=[f" {line['output']}", " I do not know.", " The answer is forty-two."])


def generation_prompt(line: dict, task_name: str | None = None) -> Doc:
    """The instruction; the row's output is the gold answer."""
    return Doc(task_name=task_name, query=f"Instruction: {line['instruction']}\nOutput:", choices=[line["output"]],
               gold_index=0)


def rolling_prompt(line: dict, task_name: str | None = None) -> Doc:
    """The whole row as one text, as lighteval's wikitext task builds its Docs."""
    return Doc(task_name=task_name, query=f"{line['instruction']}\n{line['output']}", choices=None, gold_index=None)


SAMPLE = {"hf_repo": DATA, "hf_subset": "sample", "hf_avail_splits": ["test"], "evaluation_splits": ["test"]}

TASKS_TABLE = [
    LightevalTaskConfig(name="hf_adapters_shipped_choice", prompt_function=choice_prompt,
                        metrics=[Metrics.loglikelihood_acc], **SAMPLE),
    # " Ca" and "qu": what the random tiny model of tests/conftest.py writes, so that responses are cut there
    LightevalTaskConfig(name="hf_adapters_shipped_generation", prompt_function=generation_prompt,
                        metrics=[Metrics.exact_match], generation_size=8, stop_sequence=["\n", " Ca", "qu"],
                        **SAMPLE),
    LightevalTaskConfig(name="hf_adapters_shipped_rolling", prompt_function=rolling_prompt,
                        metrics=[Metrics.word_perplexity, Metrics.byte_perplexity, Metrics.bits_per_byte], **SAMPLE),
]
