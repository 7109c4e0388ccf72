"""Perplexity of texts under a causal language model, batched exactly on the shared core of `hf_adapters`."""

from hf_adapters.integrations.evaluate_modules import ModuleCard, ScorerMetric
from hf_adapters.scorers import ConversationPerplexityScorer, PerplexityScorer

_CITATION = """\
@article{jelinek1977perplexity,
  title={Perplexity--a measure of the difficulty of speech recognition tasks},
  author={Jelinek, Fred and Mercer, Robert L and Bahl, Lalit R and Baker, James K},
  journal={The Journal of the Acoustical Society of America},
  volume={62},
  number={S1},
  pages={S63--S63},
  year={1977}
}
"""

_DESCRIPTION = """\
Perplexity is the exponentiated mean negative log-likelihood of a text's tokens under a causal
language model: lower means the model finds the text more predictable. This module is a drop-in
replacement for evaluate's `perplexity` metric (same arguments, keys and numbers) that loads the
model once per process, batches texts of similar length together and computes the output layer
only where a token is scored.
"""

_KWARGS_DESCRIPTION = r"""
Args:
    predictions (list of str): the texts to score. An empty text gets NaN.
    model_id (str): a hub id, a local model directory or a local `.gguf` file. Defaults to
        HuggingFaceTB/SmolLM2-135M-Instruct, read offline from the embedded GGUF copy.
    batch_size (int): the most texts in one forward pass. Defaults to 16.
    add_start_token (bool): prepend the start token (BOS, else EOS) so the first token is scored.
        Defaults to True.
    device (str): anything torch accepts ("cpu", "cuda", "cuda:1"). Defaults to accelerate's device.
    max_length (int): right-truncate each text (start token included) to this many tokens.
        Defaults to the model's position limit. With `stride`: the most tokens the model reads per window.
    return_token_losses (bool): add, per text, its scored tokens (`tokens`) and their NLLs (`token_losses`).
    return_entropy (bool): add, per text, the mean predictive entropy over its scored tokens (`entropies`,
        in nats: -sum_v p(v | x_<i) ln p(v | x_<i) over the whole vocabulary, from the same forward pass).
    convention (str): "exact" (default) or "opendataarena": the tokens OpenDataArena-Tool's PPLScorer
        scores (the tokenizer's default special tokens, every token after the first; `add_start_token`
        is not used).
    messages (list of conversations, optional): instead of `predictions`, conversations as lists of
        {"role", "content"} turns: the perplexity of each one's assistant tokens, every assistant turn
        after its history rendered by the tokenizer's chat template (what a fine-tuning loss sees).
    turn_template (str, optional): with `messages`: a turn layout with {role} and {content} used
        instead of the chat template.
    stride (int, optional): score every token of every text, in lm-evaluation-harness's rolling
        windows: each window predicts at most `stride` new tokens after the tokens before them
        (`stride=max_length`: lm-eval's disjoint windows). Adds `word_perplexity`,
        `byte_perplexity`, `bits_per_byte`, and per text `nlls` and `token_counts`.
    dtype (str): "float32" (default on CPU), "bfloat16" (default on CUDA, approximate) or "float16".
    model, tokenizer: an already loaded model and tokenizer (e.g. a PEFT model), used instead of `model_id`.
    backend (optional): a `hf_adapters.LikelihoodBackend` that computes the likelihoods (or the name of
        a registered one), instead of `model_id` or `model` and `tokenizer`.
Returns:
    perplexities (list of float): one per text.
    mean_perplexity (float): the mean of the per-text perplexities (over texts that have a score).
    corpus_perplexity (float): exp(total NLL / total scored tokens).
    With `stride`, also as lm-eval reports them, over all texts: word_perplexity (exp(total NLL /
    words), words counted as lm-eval does: re.split(r"\s+", text)), byte_perplexity (exp(total NLL /
    UTF-8 bytes)) and bits_per_byte (total NLL / bytes / ln 2); and per text nlls (total NLL in nats)
    and token_counts.
Examples:
    >>> perplexity = evaluate.load("./metrics/perplexity")
    >>> results = perplexity.compute(predictions=["The cat sat on the mat.", "Colorless green ideas."])
    >>> sorted(results)
    ['corpus_perplexity', 'mean_perplexity', 'perplexities']
"""


class Perplexity(ScorerMetric):
    card = ModuleCard(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION,
                      reference_urls=("https://huggingface.co/docs/transformers/perplexity",))
    columns = {"predictions": "text"}
    scorer = PerplexityScorer
    conversation_scorer = ConversationPerplexityScorer
