"""IFEval: does a response follow verifiable instructions? Strict and loose, prompt and instruction level."""

from hf_adapters.ifeval import compute_ifeval
from hf_adapters.ifeval.serialization import rows_from_json, rows_to_json
from hf_adapters.integrations.evaluate_modules import ModuleCard, ScorerMetric

_CITATION = """\
@article{zhou2023instruction,
  title={Instruction-Following Evaluation for Large Language Models},
  author={Zhou, Jeffrey and Lu, Tianjian and Mishra, Swaroop and Brahma, Siddhartha and Basu, Sujoy
          and Luan, Yi and Zhou, Denny and Hou, Le},
  journal={arXiv preprint arXiv:2311.07911},
  year={2023}
}
"""

_DESCRIPTION = """\
IFEval scores whether responses follow "verifiable instructions" such as "answer in fewer than 100
words", "do not use any commas" or "wrap your answer in double quotes". Each prompt carries one or
more of 25 instruction types; each is checked by a deterministic rule. Strict mode checks the
response as is; loose mode also accepts the response with asterisks removed and/or its first or
last line dropped. The checks reproduce the reference implementation (google-research
instruction_following_eval) result for result, offline.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the model responses.
    references (list of dict): IFEval rows, one per response, with `instruction_id_list` (list of
        str) and `kwargs` (list of dict, one per id), and optionally `key` and `prompt`. Rows of
        Google's JSONL (absent kwargs missing) and of the hub data set `google/IFEval` (absent
        kwargs `None`) both work; `None` values are ignored.
    detailed (bool): also return per-prompt lists and a per-instruction-id breakdown. Defaults to False.
Returns:
    prompt_level_strict_acc (float): share of prompts whose instructions are all followed, strict.
    inst_level_strict_acc (float): share of all instructions followed, strict (micro average).
    prompt_level_loose_acc (float), inst_level_loose_acc (float): the same in loose mode.
    With `detailed=True`, also:
    strict_follow_instruction_list, loose_follow_instruction_list (list of list of bool): per prompt.
    per_instruction (dict): per instruction id, `count`, `strict_followed`, `strict_acc`,
        `loose_followed` and `loose_acc`.
Examples:
    >>> ifeval = evaluate.load("./metrics/ifeval")
    >>> row = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    >>> ifeval.compute(predictions=["Hello world."], references=[row])["prompt_level_strict_acc"]
    1.0
"""


class IFEval(ScorerMetric):
    card = ModuleCard(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION,
                      codebase_urls=("https://github.com/google-research/google-research/tree/master/"
                                     "instruction_following_eval",),
                      reference_urls=("https://arxiv.org/abs/2311.07911",))
    columns = {"predictions": "predictions", "references": "references"}
    # References are rows of any shape (kwargs dicts differ per instruction id), so they travel through
    # evaluate's Arrow cache as JSON strings, checked (an error names the row and id) as they are encoded.
    encoded_columns = {"references": (rows_to_json, rows_from_json)}
    formula = staticmethod(compute_ifeval)
