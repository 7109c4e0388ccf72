"""DEITA's quality of responses (a scorer model's expected rating 1-6), exactly on the shared core of `hf_adapters`."""

from hf_adapters.integrations.evaluate_modules import ModuleCard, ScorerMetric
from hf_adapters.scorers import DeitaQScorer

_CITATION = """\
@inproceedings{liu2024deita,
  title={What Makes Good Data for Alignment? A Comprehensive Study of Automatic Data Selection in Instruction Tuning},
  author={Liu, Wei and Zeng, Weihao and He, Keqing and Jiang, Yong and He, Junxian},
  booktitle={The Twelfth International Conference on Learning Representations},
  year={2024}
}
"""

_DESCRIPTION = """\
DEITA's quality of a response to an instruction: its scorer model (hkust-nlp/deita-quality-scorer, or any
causal language model whose vocabulary has the entries "1".."6") reads DEITA's rating prompt around the
instruction and the response; at the position after the prompt, the logits of "1".."6", their softmax
over the six, and the expected rating sum_r r * p_r, from 1 (poor) to 6 (excellent). Each prompt takes one
forward pass of the shared core, batched by its token budget; the labels are all read from it.
"""

_KWARGS_DESCRIPTION = """
Args:
    instructions (list of str): the instructions.
    outputs (list of str): the responses to rate.
    inputs (list of str, optional): each row's input, on the line after its instruction; omitted, None or
        "" means no input.
    model_id (str): the scorer model (a hub id, a local folder or a `.gguf` file); default the embedded
        SmolLM2-135M-Instruct. Or `model` and `tokenizer` (loaded objects), or `backend`.
    max_length (int): the longest prompt in tokens, with the label (default: the model's position limit).
    convention (str): "exact" (default): DEITA's prompt, a longer prompt gets NaN; "opendataarena":
        OpenDataArena-Tool's DeitaQScorer (its prompt, the texts stripped, a longer prompt cut to its first
        tokens).
    batch_size (int): the most prompts in one forward pass. Defaults to 16.
    dtype (str), device (str): how the model runs.
Returns:
    deita_scores (list of float): per row, the expected rating from 1 to 6 (NaN for a prompt too long).
Examples:
    >>> deita_quality = evaluate.load("./metrics/deita_quality")
    >>> result = deita_quality.compute(
    ...     instructions=["Name a primary colour.", "Prove that there are infinitely many primes."],
    ...     outputs=["Blue.", "Suppose there were finitely many; multiply them and add one."])
    >>> [round(score, 2) for score in result["deita_scores"]]
    [2.22, 1.84]
"""


class DeitaQuality(ScorerMetric):
    card = ModuleCard(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION,
                      reference_urls=("https://arxiv.org/abs/2312.15685",),
                      codebase_urls=("https://github.com/hkust-nlp/deita",))
    columns = {"instructions": "instruction", "inputs": "input", "outputs": "output"}
    optional_columns = ("inputs",)
    scorer = DeitaQScorer
