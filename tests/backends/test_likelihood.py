"""The shared likelihood core against the naive one-at-a-time reference."""

import logging
import math
import random

import pytest
import torch

from hf_adapters.backends.transformers import model as transformers_model
from hf_adapters.backends.transformers.model import OUTPUT_CHUNK_POSITIONS, score_continuations
from hf_adapters.core.likelihood import ContinuationScore, make_batches, start_token_id
from tests.conftest import assert_exact, build_model, build_tokenizer, naive_nll

TEXTS = [
    ("Write a poem about the sea.", " The sea is wide and deep, it sings."),
    ("", "The quick brown fox jumps over the lazy dog."),
    ("Summarise:", " Cats."),
    ("A much longer context sentence that keeps going for a while, " * 3, " and then an answer."),
    ("短い", " 敏捷的棕色狐狸 🦊"),
]


def encode(tokenizer, pairs):
    return [
        (tokenizer(c, add_special_tokens=False).input_ids, tokenizer(a, add_special_tokens=False).input_ids)
        for c, a in pairs
    ]


def assert_matches_naive(model, tokenizer, items, scores, max_length=None):
    start = start_token_id(tokenizer)
    counts = [naive_nll(model, context, continuation, start, max_length)[1] for context, continuation in items]
    assert [score.num_tokens for score in scores] == counts

    def naive(m):
        return [naive_nll(m, context, continuation, start, max_length)[0] for context, continuation in items]

    assert_exact([score.nll for score in scores], naive, model)


@pytest.mark.parametrize("max_padding", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("batch_size", [1, 2, 3, 16])
@pytest.mark.kernels
def test_scores_equal_naive_reference_for_any_batch_size(model, tokenizer, batch_size, max_padding):
    items = encode(tokenizer, TEXTS)
    scores = score_continuations(model, tokenizer, items, batch_size=batch_size, max_padding=max_padding)
    assert_matches_naive(model, tokenizer, items, scores)


@pytest.mark.parametrize("max_padding", [0.1, 1.0])
@pytest.mark.kernels
def test_scores_do_not_depend_on_order_or_token_budget(model, tokenizer, max_padding):
    items = encode(tokenizer, TEXTS * 3)
    reference = score_continuations(model, tokenizer, items, batch_size=1)
    order = list(range(len(items)))
    random.Random(0).shuffle(order)
    shuffled = score_continuations(model, tokenizer, [items[i] for i in order], batch_size=7, max_batch_tokens=90,
                                   max_padding=max_padding)
    for position, i in enumerate(order):
        assert shuffled[position].nll == pytest.approx(reference[i].nll, rel=1e-5)


@pytest.mark.kernels
def test_cpu_batches_pad_at_most_ten_percent_and_build_no_attention_mask(model, tokenizer, monkeypatch):
    items = encode(tokenizer, TEXTS * 2) + [([5] * 40, [6] * 20), ([5] * 40, [6] * 18), ([5] * 40, [6] * 10)]
    batches = []
    original = transformers_model._padded_inputs

    def recording_padded_inputs(sequences, pad_id):
        inputs, offsets = original(sequences, pad_id)
        batches.append((inputs["attention_mask"], [len(sequence) for sequence in sequences]))
        return inputs, offsets

    monkeypatch.setattr(transformers_model, "_padded_inputs", recording_padded_inputs)
    scores = score_continuations(model, tokenizer, items, batch_size=16)
    monkeypatch.undo()
    assert_matches_naive(model, tokenizer, items, scores)
    assert len(batches) < len(items)
    for mask, lengths in batches:
        assert max(lengths) - min(lengths) <= 0.1 * max(lengths)
        assert mask is None
    assert any(min(lengths) < max(lengths) for _, lengths in batches)


def _architecture(name: str, vocab_size: int):
    import transformers

    torch.manual_seed(0)
    small = {"vocab_size": vocab_size, "bos_token_id": None, "eos_token_id": None}
    configs = {
        "gpt2 (learned absolute positions)": transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=512,
                                                                    **small),
        "mistral (sliding window)": transformers.MistralConfig(hidden_size=32, intermediate_size=64,
                                                               num_hidden_layers=2, num_attention_heads=4,
                                                               num_key_value_heads=2, sliding_window=8, **small),
        "gemma2 (soft-capping, alternating sliding window)": transformers.Gemma2Config(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, sliding_window=8, **small),
    }
    return transformers.AutoModelForCausalLM.from_config(configs[name]).eval()


@pytest.mark.parametrize("architecture", ["gpt2 (learned absolute positions)", "mistral (sliding window)",
                                          "gemma2 (soft-capping, alternating sliding window)"])
@pytest.mark.kernels
def test_right_padding_without_mask_leaves_scores_exact_across_architectures(tokenizer, architecture):
    model = _architecture(architecture, len(tokenizer))
    items = encode(tokenizer, TEXTS) + [([5] * 30, [6] * 12)]
    scores = score_continuations(model, tokenizer, items, batch_size=16, max_padding=1.0)
    assert_matches_naive(model, tokenizer, items, scores)


def test_empty_context_is_replaced_by_bos_so_first_token_is_scored(model, tokenizer):
    continuation = tokenizer("hello", add_special_tokens=False).input_ids
    [score] = score_continuations(model, tokenizer, [([], continuation)])
    [explicit] = score_continuations(model, tokenizer, [([tokenizer.bos_token_id], continuation)])
    assert score.num_tokens == len(continuation)
    assert score.nll == pytest.approx(explicit.nll, rel=1e-6)


@pytest.mark.kernels
def test_start_token_falls_back_to_eos_without_bos():
    tokenizer = build_tokenizer(bos=False, pad=False)
    model = build_model(len(tokenizer))
    assert start_token_id(tokenizer) == tokenizer.eos_token_id
    items = encode(tokenizer, TEXTS)
    scores = score_continuations(model, tokenizer, items, batch_size=4)
    assert_matches_naive(model, tokenizer, items, scores)


@pytest.mark.kernels
def test_truncation_keeps_context_and_scores_the_remaining_continuation(model, tokenizer):
    items = encode(tokenizer, TEXTS)
    scores = score_continuations(model, tokenizer, items, max_length=12, batch_size=4)
    assert_matches_naive(model, tokenizer, items, scores, max_length=12)
    assert any(score.truncated for score in scores)


@pytest.mark.kernels
def test_item_without_scored_token_gets_nan_and_leaves_neighbours_alone(model, tokenizer, caplog):
    items = encode(tokenizer, TEXTS)
    long_context = (list(range(5, 25)), [30, 31])
    empty_answer = (items[0][0], [])
    with caplog.at_level(logging.WARNING):
        scores = score_continuations(
            model, tokenizer, [items[0], long_context, empty_answer, items[1]], max_length=16, batch_size=4
        )
    assert math.isnan(scores[1].nll) and scores[1].truncated
    assert math.isnan(scores[2].nll) and not scores[2].truncated
    assert "no token to score" in caplog.text
    assert_matches_naive(model, tokenizer, [items[0], items[1]], [scores[0], scores[3]], max_length=16)


def test_default_max_length_is_the_model_position_limit(tokenizer):
    model = build_model(len(tokenizer), max_position_embeddings=32)
    items = encode(tokenizer, [("", "word " * 100)])
    [score] = score_continuations(model, tokenizer, items)
    assert score.truncated and score.num_tokens == 31


def test_a_max_length_beyond_the_position_limit_is_capped_at_it(tokenizer):
    model = build_model(len(tokenizer), max_position_embeddings=32)
    items = encode(tokenizer, [("", "word " * 100)])
    [score] = score_continuations(model, tokenizer, items, max_length=100)
    assert score.truncated and score.num_tokens == 31


def test_perplexity_of_a_score_is_exp_of_its_mean_nll_nan_without_tokens():
    assert ContinuationScore(6.0, 3, False).perplexity == pytest.approx(math.exp(2.0))
    assert math.isnan(ContinuationScore(math.nan, 0, False).perplexity)


def test_output_layer_runs_only_at_scored_positions(model, tokenizer):
    items = encode(tokenizer, TEXTS)
    seen_rows = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, inputs, output: seen_rows.append(inputs[0].shape)
    )
    try:
        score_continuations(model, tokenizer, items, batch_size=16)
    finally:
        hook.remove()
    scored = sum(len(continuation) for _, continuation in items)
    assert all(len(shape) == 2 for shape in seen_rows)
    assert sum(shape[0] for shape in seen_rows) == scored


@pytest.mark.kernels
def test_output_layer_is_chunked_for_large_vocabularies(model, tokenizer, monkeypatch):
    monkeypatch.setattr("hf_adapters.backends.transformers.model.OUTPUT_CHUNK_POSITIONS", 5)
    items = encode(tokenizer, TEXTS)
    chunk_sizes = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, inputs, output: chunk_sizes.append(inputs[0].shape[0])
    )
    try:
        scores = score_continuations(model, tokenizer, items)
    finally:
        hook.remove()
    assert max(chunk_sizes) <= 5 < OUTPUT_CHUNK_POSITIONS
    assert_matches_naive(model, tokenizer, items, scores)


@pytest.mark.kernels
def test_cpu_output_chunks_keep_their_logits_within_the_byte_budget(model, tokenizer, monkeypatch):
    vocabulary = model.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr("hf_adapters.backends.transformers.model.CPU_OUTPUT_CHUNK_BYTES", 3 * 4 * vocabulary + 1)
    items = encode(tokenizer, TEXTS)
    chunk_sizes = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, inputs, output: chunk_sizes.append(inputs[0].shape[0])
    )
    try:
        scores = score_continuations(model, tokenizer, items)
    finally:
        hook.remove()
    assert max(chunk_sizes) == 3
    assert_matches_naive(model, tokenizer, items, scores)


@pytest.mark.filterwarnings("ignore::hf_adapters.backends.transformers.cpu_kernels.SlowBfloat16Warning")
@pytest.mark.kernels
def test_bfloat16_model_scores_log_softmax_in_float32(tokenizer):
    model = build_model(len(tokenizer)).to(torch.bfloat16)
    items = encode(tokenizer, TEXTS)
    scores = score_continuations(model, tokenizer, items)
    reference = build_model(len(tokenizer))
    start = start_token_id(tokenizer)
    for (context, continuation), score in zip(items, scores, strict=True):
        expected, _ = naive_nll(reference, context, continuation, start)
        assert math.isfinite(score.nll)
        assert score.nll == pytest.approx(expected, rel=0.05)


def test_batches_are_longest_first_within_row_and_token_budgets():
    lengths = [3, 10, 7, 7, 2, 9]
    batches = make_batches(lengths, batch_size=2, max_batch_tokens=18)
    assert [i for batch in batches for i in batch] == [1, 5, 2, 3, 0, 4]
    for batch in batches:
        assert len(batch) <= 2
        assert len(batch) == 1 or lengths[batch[0]] * len(batch) <= 18
    assert make_batches([50], batch_size=4, max_batch_tokens=10) == [[0]]
    unpadded = make_batches(lengths, batch_size=4, max_batch_tokens=None, max_padding=0.0)
    assert unpadded == [[1], [5], [2, 3], [0], [4]]
    assert make_batches(lengths, batch_size=4, max_batch_tokens=None, max_padding=0.1) == [[1, 5], [2, 3], [0], [4]]


@pytest.mark.parametrize("batch_size", [1, 3, 16])
@pytest.mark.kernels
def test_packed_batches_equal_the_naive_reference(model, tokenizer, batch_size):
    items = encode(tokenizer, TEXTS * 2)
    scores = score_continuations(model, tokenizer, items, batch_size=batch_size, packing=True)
    assert_matches_naive(model, tokenizer, items, scores)


@pytest.mark.kernels
def test_packing_lays_items_end_to_end_with_restarting_positions_and_no_mask(model, tokenizer, monkeypatch):
    items = encode(tokenizer, TEXTS[:3])
    calls = []
    original = model.base_model.forward

    def recording_forward(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(model.base_model, "forward", recording_forward)
    packed = score_continuations(model, tokenizer, items, batch_size=16, packing=True)
    monkeypatch.undo()
    [call] = calls
    lengths = sorted((max(len(c), 1) + len(a) for c, a in items), reverse=True)
    assert call["input_ids"].shape == (1, sum(lengths)) and call["attention_mask"] is None
    assert call["position_ids"][0].tolist() == [p for n in lengths for p in range(n)]
    padded = score_continuations(model, tokenizer, items, batch_size=16, packing=False, max_padding=1.0)
    assert [s.nll for s in packed] == pytest.approx([s.nll for s in padded], rel=1e-5)


def test_packing_is_the_default_for_flash_attention_models(model, tokenizer, monkeypatch):
    layouts = []
    monkeypatch.setattr(transformers_model, "_score_batch",
                        lambda model, batch, pad_id, packed, body=None:
                        layouts.append(packed) or [(item, 0.0) for item in batch])
    items = encode(tokenizer, TEXTS[:2])
    score_continuations(model, tokenizer, items)
    monkeypatch.setattr(model.config, "_attn_implementation", "flash_attention_2")
    score_continuations(model, tokenizer, items)
    assert layouts[0] is False and layouts[-1] is True


@pytest.mark.kernels
def test_an_item_that_begins_the_next_one_is_scored_in_its_forward_pass(model, tokenizer):
    # Two turns of one conversation, then a repeated row: three forward sequences, not five.
    history = tokenizer("User: Name a colour.\nAssistant:", add_special_tokens=False).input_ids
    answer = tokenizer(" Blue.", add_special_tokens=False).input_ids
    follow_up = history + answer + tokenizer("\nUser: Another?\nAssistant:", add_special_tokens=False).input_ids
    second = tokenizer(" Red is one too.", add_special_tokens=False).input_ids
    other = tokenizer("Write a short poem about the sea.", add_special_tokens=False).input_ids
    items = [(history, answer), (follow_up, second), ([], other), ([], other), (follow_up[:4], follow_up[4:9])]
    sequences = []
    hook = model.base_model.register_forward_hook(lambda module, args, kwargs, output: sequences.append(
        kwargs["input_ids"].shape[0]), with_kwargs=True)
    try:
        scores = score_continuations(model, tokenizer, items, batch_size=1, token_losses=True)
    finally:
        hook.remove()
    assert sum(sequences) == 3
    start = tokenizer.bos_token_id
    assert_exact([s.nll for s in scores], lambda m: [naive_nll(m, c, a, start)[0] for c, a in items], model)
    assert [len(s.token_nlls) for s in scores] == [len(a) for _, a in items]
