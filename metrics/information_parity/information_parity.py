"""Information Parity of texts against parallel reference texts, batched exactly on the shared core of `hf_adapters`."""

from hf_adapters.formulas.information_parity import check_pairs
from hf_adapters.integrations.evaluate_modules import ModuleCard, ScorerMetric
from hf_adapters.scorers import InformationParityScorer

_CITATION = """\
@inproceedings{tsvetkov-kipnis-2024-information,
  title={Information Parity: Measuring and Predicting the Multilingual Capabilities of Language Models},
  author={Tsvetkov, Alexander and Kipnis, Alon},
  booktitle={Findings of the Association for Computational Linguistics: EMNLP 2024},
  year={2024},
  url={https://aclanthology.org/2024.findings-emnlp.468}
}
"""

_DESCRIPTION = """\
Information Parity (IP) compares how efficiently a causal language model compresses a text in the
language under test with how it compresses the parallel text in a reference language (usually
English): per pair, NLL(reference) / NLL(prediction), each the total NLL of the whole text. A
value near 1 means the language costs the model as many bits as the reference; lower means more.
Every distinct text is scored once, in length-sorted batches, with float32 log-softmax.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): texts in the language under test. An empty text gives NaN for its pair.
    references (list of str): the parallel texts in the reference language, as many as `predictions`.
    model_id (str): a hub id, a local model directory or a local `.gguf` file. Defaults to
        HuggingFaceTB/SmolLM2-135M-Instruct, read offline from the embedded GGUF copy.
    batch_size (int): the most texts in one forward pass. Defaults to 16.
    max_length (int): right-truncate each text (start token included) to this many tokens.
        Defaults to the model's position limit.
    dtype (str): "float32" (default on CPU), "bfloat16" (default on CUDA, approximate) or "float16".
    device (str): anything torch accepts ("cpu", "cuda", "cuda:1"). Defaults to accelerate's device.
    model, tokenizer: an already loaded model and tokenizer, used instead of `model_id`.
    backend (optional): a `hf_adapters.LikelihoodBackend` that computes the likelihoods (or the name of
        a registered one), instead of `model_id` or `model` and `tokenizer`.
Returns:
    scores (list of float): per pair, NLL(reference) / NLL(prediction); NaN if either text is empty.
    information_parity (float): the mean of the valid per-pair scores.
    information_parity_std (float): their population standard deviation (ddof=0).
    information_parity_median (float): their median.
    corpus_information_parity (float): total reference NLL / total prediction NLL.
    tokenization_parity (float): total prediction tokens / total reference tokens.
    bits_per_byte (float): total prediction NLL in bits / UTF-8 bytes of the predictions (pairs with a
        text cut to max_length left out).
    reference_bits_per_byte (float): the same for the references.
    The corpus numbers are over the valid pairs.
Examples:
    >>> information_parity = evaluate.load("./metrics/information_parity")
    >>> results = information_parity.compute(
    ...     predictions=["Le chat dort sur le canapé."], references=["The cat is sleeping on the sofa."])
    >>> sorted(results)[:3]
    ['bits_per_byte', 'corpus_information_parity', 'information_parity']
"""


class InformationParity(ScorerMetric):
    card = ModuleCard(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION,
                      reference_urls=("https://aclanthology.org/2024.findings-emnlp.468",
                                      "https://pypi.org/project/information-parity/"))
    columns = {"predictions": "prediction", "references": "reference"}
    check_rows = staticmethod(check_pairs)
    scorer = InformationParityScorer
