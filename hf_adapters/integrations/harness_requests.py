"""The requests an evaluation harness makes of a model, answered by any of our backends: what the
lm-evaluation-harness model (:mod:`hf_adapters.integrations.lm_eval_harness`) and the lighteval model
(:mod:`hf_adapters.integrations.lighteval_model`) share. Each harness encodes its own text and says
how much of it the model reads; these functions turn the tokens into one backend call and the call's
result into the harness's numbers and texts, exactly (equal to one request at a time, whatever the batch).

- :func:`fit_context`: a context cut from the left so that it and its whole continuation fit a window;
- :func:`loglikelihoods`: each continuation's log-likelihood and whether it is the greedy one;
- :func:`rolling_loglikelihoods`: a whole text's log-likelihood, every token scored once in
  lm-eval's disjoint windows;
- :func:`greedy_responses`: greedy generation, the text cut at the first stop sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.core.likelihood import combined
from hf_adapters.core.texts import rolling_items

#: (context ids, continuation ids), as :meth:`LikelihoodBackend.score` takes them.
Pair = tuple[Sequence[int], Sequence[int]]


def fit_context(context_ids: Sequence[int], continuation_ids: Sequence[int], window: int) -> list[int]:
    """The last tokens of the context that fit with the whole continuation in ``window`` tokens.

    A continuation that leaves no room for one token of context is refused (a ValueError): it
    cannot be scored in one window.

        >>> fit_context([1, 2, 3, 4], [5, 6], window=4)
        [3, 4]
    """
    room = window - len(continuation_ids)
    if room < 1:
        raise ValueError(f"A continuation of {len(continuation_ids)} tokens leaves no room for its context in a "
                         f"window of {window} tokens: it cannot be scored in one window (raise max_length).")
    return list(context_ids)[-room:]


def loglikelihoods(backend: LikelihoodBackend, pairs: Sequence[Pair], *, batch_size: int | None = None,
                   progress: bool | None = None, desc: str = "loglikelihood") -> list[tuple[float, bool]]:
    """(log-likelihood, is greedy) of each pair's continuation after its context, nothing cut (an
    empty context is the backend's start token)."""
    scores = backend.score_checked(pairs, truncate=False, greedy=True, batch_size=batch_size, progress=progress,
                                   desc=desc)
    return [(-score.nll, score.greedy) for score in scores]


def rolling_loglikelihoods(backend: LikelihoodBackend, texts: Sequence[Sequence[int]], max_length: int, *,
                           batch_size: int | None = None, progress: bool | None = None,
                           desc: str = "loglikelihood_rolling") -> list[float]:
    """The log-likelihood of each whole text (its tokens), every token scored once after the start
    token in lm-eval's disjoint windows of ``max_length`` (:func:`~hf_adapters.core.texts.rolling_items`):
    0 for a text with no token, as lm-eval has it; NaN where the backend could not compute a token's."""
    windows = [rolling_items(ids, max_length, max_length) for ids in texts]
    scores = iter(backend.score_checked([window for text in windows for window in text], truncate=False,
                                        batch_size=batch_size, progress=progress, desc=desc))
    totals = []
    for text in windows:
        score = combined([next(scores) for _ in text])
        totals.append(-score.nll if score.num_tokens else 0.0)
    return totals


@dataclass(frozen=True)
class GreedyRequest:
    """One greedy generation: the prompt's tokens as the model reads them (empty: the start token),
    the most new tokens, and the strings that end the response (none of them is kept)."""

    prompt_ids: Sequence[int]
    max_new_tokens: int
    stop_sequences: tuple[str, ...] = ()


def cut_at_stop_sequences(text: str, stop_sequences: Sequence[str]) -> str:
    """``text`` up to the first place where any of the stop sequences begins (an empty one stops nothing).

        >>> cut_at_stop_sequences("The fox.\\nThe dog.", ["dog", "\\n"])
        'The fox.'
    """
    for stop in stop_sequences:
        if stop:
            text = text.split(stop, 1)[0]
    return text


def greedy_responses(backend: LikelihoodBackend, requests: Sequence[GreedyRequest], *, batch_size: int | None = None,
                     progress: bool | None = None, desc: str = "generate_until") -> list[str]:
    """Each request's greedy response, decoded without special tokens and cut at its first stop
    sequence; the backend stops at EOS or after ``max_new_tokens``, in one call per budget."""
    by_budget: dict[int, list[int]] = {}
    for index, request in enumerate(requests):
        by_budget.setdefault(request.max_new_tokens, []).append(index)
    responses = [""] * len(requests)
    for max_new_tokens, indices in by_budget.items():
        prompts = [list(requests[index].prompt_ids) or [backend.start_token_id] for index in indices]
        outputs = backend.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress,
                                   desc=desc)
        for index, tokens in zip(indices, outputs, strict=True):
            text = backend.tokenizer.decode(tokens, skip_special_tokens=True)
            responses[index] = cut_at_stop_sequences(text, requests[index].stop_sequences)
    return responses
