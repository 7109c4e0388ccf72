"""Instruction-Following Difficulty (IFD) of instruction data, computed exactly on the shared core of `hf_adapters`."""

from hf_adapters.formulas.ifd import check_ifd_inputs
from hf_adapters.integrations.evaluate_modules import ModuleCard, ScorerMetric
from hf_adapters.scorers import ConversationIFDScorer, IFDScorer

_CITATION = """\
@inproceedings{li-etal-2024-quantity,
  title={From Quantity to Quality: Boosting {LLM} Performance with Self-Guided Data Selection for Instruction Tuning},
  author={Li, Ming and Zhang, Yong and Li, Zhitao and Chen, Jiuhai and Chen, Lichang and Cheng, Ning and
          Wang, Jianzong and Zhou, Tianyi and Xiao, Jing},
  booktitle={Proceedings of the 2024 Conference of the North American Chapter of the Association for
             Computational Linguistics: Human Language Technologies (Volume 1: Long Papers)},
  year={2024},
  url={https://aclanthology.org/2024.naacl-long.421}
}
"""

_DESCRIPTION = """\
Instruction-Following Difficulty (IFD) measures how much an instruction helps a causal language
model predict its answer: the perplexity of the answer after the prompt, PPL(A|Q), divided by its
perplexity after the start token alone, PPL(A), over exactly the same answer tokens. Low IFD: the
instruction makes the answer much easier; IFD near or above 1: the instruction barely helps (or
hurts). Both passes go through one batched call of the shared likelihood core.
"""

_KWARGS_DESCRIPTION = """
Args:
    instructions (list of str): the instructions (Q).
    outputs (list of str): the answers (A). An empty answer gets NaN.
    inputs (list of str, optional): each row's input; omitted, None or "" means no input.
    model_id (str): a hub id, a local model directory or a local `.gguf` file. Defaults to
        HuggingFaceTB/SmolLM2-135M-Instruct, read offline from the embedded GGUF copy.
    template (str): the prompt of a row with an input, with `{instruction}` and `{input}`. Defaults to
        the seed's ChatML prompt (or the convention's). "chat" uses the tokenizer's chat template (one
        user message).
    template_no_input (str): the prompt of a row without input, with `{instruction}`.
    max_length (int): right-truncate prompt + answer to this many tokens (default 2048; capped at the
        model's position limit). A row whose prompt fills it gets NaN.
    batch_size (int): the most sequences in one forward pass. Defaults to 16.
    mode (str): "ppl_ratio" (default): PPL(A|Q) / PPL(A); "loss_ratio": mean NLL(A|Q) / mean NLL(A).
    convention (str): "exact" (default): the definition above; "cherry", "superfiltering" or
        "opendataarena": the token pairs, prompt and ratio of that peer's published code, to reproduce
        its numbers exactly (see the card's comparison table).
    direction (str): "forward" (default): IFD; "reverse": r-IFD (Selective Reflection-Tuning),
        PPL(Q|A) / PPL(Q), the question (instruction, and input after a newline) after the answer.
    reverse_template (str): the reverse pass's prompt, with `{output}`; defaults to a ChatML prompt.
    return_token_losses (bool): add, per row, the scored answer tokens (`tokens`) and their NLLs after
        the prompt (`conditional_token_losses`) and alone (`direct_token_losses`).
    dtype (str): "float32" (default on CPU), "bfloat16" (default on CUDA, approximate) or "float16".
    device (str): anything torch accepts ("cpu", "cuda", "cuda:1"). Defaults to accelerate's device.
    model, tokenizer: an already loaded model and tokenizer, used instead of `model_id`.
    backend (optional): a `hf_adapters.LikelihoodBackend` that computes the likelihoods (or the name of
        a registered one), instead of `model_id` or `model` and `tokenizer`.
    messages (list of conversations, optional): instead of the three columns, conversations as lists
        of {"role", "content"} turns (roles system, user, assistant; ShareGPT {"from", "value"} turns
        with human and gpt work too). Each assistant turn is scored after its history, rendered by the
        tokenizer's chat template (ChatML without one).
    turns (str): with `messages`: "last" (default) scores the last assistant turn; "all" every one,
        and the conversation's IFD is then taken over all its assistant tokens.
    turn_template (str, optional): with `messages`: a turn layout with {role} and {content} used
        instead of the chat template.
Returns:
    ifd_scores (list of float): one per row, NaN for a row with nothing to score.
    conditional_perplexities (list of float): PPL(A|Q) per row.
    direct_perplexities (list of float): PPL(A) per row.
    mean_ifd (float): the mean of the non-NaN IFD scores.
    num_valid (int): how many rows have an IFD score.
    turn_ifd_scores (list of lists of float): with `messages`, the IFD of each scored assistant turn.
Examples:
    >>> ifd = evaluate.load("./metrics/ifd")
    >>> results = ifd.compute(
    ...     instructions=["Name a primary colour.", "Translate to French."],
    ...     inputs=["", "Good morning."],
    ...     outputs=["Red.", "Bonjour."],
    ... )
    >>> results["num_valid"]
    2
"""


class IFD(ScorerMetric):
    card = ModuleCard(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION,
                      reference_urls=("https://aclanthology.org/2024.naacl-long.421/",))
    columns = {"instructions": "instruction", "inputs": "input", "outputs": "output"}
    optional_columns = ("inputs",)
    check_rows = staticmethod(check_ifd_inputs)
    scorer = IFDScorer
    conversation_scorer = ConversationIFDScorer
