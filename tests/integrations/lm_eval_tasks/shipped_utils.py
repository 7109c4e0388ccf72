"""Helpers of the test tasks in this folder (lm-eval imports this file by name)."""

from lm_eval.tasks.ifeval.utils import agg_inst_level_acc, process_results


def choices(doc: dict) -> list[str]:
    """The row's own output first, then two fixed other answers."""
    return [doc["output"], "I do not know.", "The answer is forty-two."]


def ifeval_results(doc: dict, results: list[str]) -> dict:
    """lm-eval's IFEval scoring of one response."""
    return process_results(doc, results)


def ifeval_instruction_accuracy(items: list) -> float:
    """lm-eval's instruction-level accuracy."""
    return agg_inst_level_acc(items)
