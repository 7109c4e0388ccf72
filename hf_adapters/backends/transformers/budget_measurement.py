"""The token budget of an accelerator's batches chosen by measurement, as the CPU kernel is.

The free memory bounds the budget (:func:`~hf_adapters.backends.transformers.batching.device_token_budget`),
but the fastest budget is often below that bound: on an H200, a 32,768-token budget ran a 1B Llama's
Alpaca-length rows at 43.4-44.4% of the bf16 peak against 41-42% for the 65,536 the memory allows
(``../shared/gpu/README.md``). So the first call of a job that holds enough tokens times the first
batch each candidate budget (``CANDIDATE_BUDGETS``, none above the memory's bound) makes of its rows,
after one untimed batch that warms the device up, and keeps the budget whose batch ran the most
tokens a second. Those batches' scores are not kept: the job scores every row in its chosen batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hf_adapters.core.likelihood import make_batches

#: The budgets timed on an accelerator (each capped at what its free memory allows).
CANDIDATE_BUDGETS = (16384, 32768, 65536)


def candidate_budgets(ceiling: int) -> list[int]:
    """The budgets to time under a memory bound of ``ceiling`` tokens: each of ``CANDIDATE_BUDGETS``,
    those above the bound replaced by it.

    Example:
        >>> candidate_budgets(65536), candidate_budgets(27648), candidate_budgets(4096)
        ([16384, 32768, 65536], [16384, 27648], [4096])
    """
    return sorted({min(budget, ceiling) for budget in CANDIDATE_BUDGETS})


def fastest_budget(rates: Mapping[int, float]) -> int:
    """The budget of the highest rate (tokens a second); of equal rates, the smaller budget.

    Example:
        >>> fastest_budget({16384: 9.0e4, 32768: 1.1e5, 65536: 1.0e5})
        32768
    """
    return max(sorted(rates), key=lambda budget: rates[budget])


def measure_budgets(run: Callable[[list[int]], object], lengths: Sequence[int], candidates: Sequence[int],
                    rows: int | None, padding: float, clock: Callable[[], float],
                    failed: Callable[[BaseException], bool]) -> dict[int, float]:
    """Tokens a second of ``run`` (which scores the items of the indices it is given, and returns once
    they are computed) on the first batch each of ``candidates`` makes of items of ``lengths``, after one
    untimed run of the smallest's; a candidate whose batch raises an error that ``failed`` accepts (out of
    memory) is left out."""
    firsts = {budget: make_batches(lengths, rows, budget, padding)[0] for budget in candidates}
    rates: dict[int, float] = {}
    for position, budget in enumerate([candidates[0], *candidates]):
        batch = firsts[budget]
        try:
            started = clock()
            run(batch)
            seconds = clock() - started
        except RuntimeError as error:
            if not failed(error):
                raise
            continue
        if position:
            rates[budget] = sum(lengths[i] for i in batch) / max(seconds, 1e-9)
    return rates
