"""Excess loss of texts under a model against a reference model, batched exactly on the shared core of `hf_adapters`."""

from hf_adapters.integrations.evaluate_modules import ModuleCard, ScorerMetric
from hf_adapters.scorers import ConversationExcessLossScorer, TextExcessLossScorer

_CITATION = """\
@inproceedings{lin2024rho1,
  title={Not All Tokens Are What You Need for Pretraining},
  author={Lin, Zhenghao and Gou, Zhibin and Gong, Yeyun and Liu, Xiao and Shen, Yelong and Xu, Ruochen and
          Lin, Chen and Yang, Yujiu and Jiao, Jian and Duan, Nan and Chen, Weizhu},
  booktitle={Advances in Neural Information Processing Systems},
  year={2024}
}
@inproceedings{mindermann2022rholoss,
  title={Prioritized Training on Points that are Learnable, Worth Learning, and not yet Learnt},
  author={Mindermann, S{\\"o}ren and Brauner, Jan M and Razzak, Muhammed T and Sharma, Mrinank and Kirsch, Andreas
          and Xu, Winnie and H{\\"o}ltgen, Benedikt and Gomez, Aidan N and Morisot, Adrien and Farquhar, Sebastian
          and Gal, Yarin},
  booktitle={International Conference on Machine Learning},
  year={2022}
}
@inproceedings{brandfonbrener2024colorfilter,
  title={{CoLoR-Filter}: Conditional Loss Reduction Filtering for Targeted Language Model Pre-training},
  author={Brandfonbrener, David and Zhang, Hanlin and Kirsch, Andreas and Schwarz, Jonathan Richard and Kakade, Sham},
  booktitle={Advances in Neural Information Processing Systems},
  year={2024}
}
"""

_DESCRIPTION = """\
Excess loss compares two causal language models that share a tokenizer on the same tokens: at each
scored token, the model's loss minus the reference model's, L_model(x_i) - L_ref(x_i) with
L = -ln p(x_i | x_<i) in nats; per text, the mean over its scored tokens (and the sum). It is the
score behind Rho-1's token selection, RHO-LOSS's reducible holdout loss, CoLoR-Filter's conditional
loss reduction and Token Cleaning. Each model scores all texts in one batched call of the shared core.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the texts to score. An empty text gets NaN.
    messages (list of conversations, optional): instead of `predictions`, conversations as lists of
        {"role", "content"} turns: the assistant tokens, each turn after its history rendered by the
        chat template (`turns`: "all", the default, or "last").
    model_id (str): the model (a hub id, a local folder or a `.gguf` file); default the embedded
        SmolLM2-135M-Instruct. Or `model` and `tokenizer` (loaded objects), or `backend`.
    reference_model_id (str): the reference model, with the same tokenizer. Or `reference_model` and
        `reference_tokenizer` (loaded objects), or `reference_backend`.
    batch_size (int): the most texts in one forward pass. Defaults to 16.
    add_start_token (bool): prepend the start token (BOS, else EOS) so the first token is scored. Default True.
    max_length (int): right-truncate each text to this many tokens (default: the models' position limit).
    return_token_losses (bool): add, per text, `tokens`, `token_excess_losses`, `token_losses` (the
        model's NLLs) and `reference_token_losses`.
    dtype (str), device (str): how both models run.
Returns:
    excess_losses (list of float): per text, the mean of L_model - L_ref over its scored tokens (nats).
    excess_loss_sums (list of float): per text, the sum.
    losses, reference_losses (list of float): per text, each model's mean NLL.
    mean_excess_loss (float): the mean of `excess_losses` over the texts that have one.
Examples:
    >>> excess_loss = evaluate.load("./metrics/excess_loss")
    >>> result = excess_loss.compute(predictions=["The cat sat on the mat."],
    ...                              reference_model_id="HuggingFaceTB/SmolLM2-135M-Instruct")
    >>> result["excess_losses"]  # the default model against itself
    [0.0]
"""


class ExcessLoss(ScorerMetric):
    card = ModuleCard(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION,
                      reference_urls=("https://arxiv.org/abs/2404.07965", "https://arxiv.org/abs/2206.07137",
                                      "https://arxiv.org/abs/2406.10670"))
    columns = {"predictions": "text"}
    scorer = TextExcessLossScorer
    conversation_scorer = ConversationExcessLossScorer
