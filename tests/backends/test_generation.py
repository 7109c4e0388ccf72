"""``greedy_generate``: batched greedy generation equals generating each prompt alone with ``model.generate``."""

from __future__ import annotations

import pytest
import torch

from hf_adapters.backends.transformers import generation
from hf_adapters.backends.transformers.generation import AloneDecoder, default_stop_token_ids, greedy_generate

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Write a short poem about the sea.",
    "Instruction: summarise the text below.\nInput: Cats are small mammals.",
    "Le renard brun saute par-dessus le chien paresseux.",
    "Cats are small mammals. " * 5,
    "Hi",
    "敏捷的棕色狐狸跳过了懒狗。🦊",
]


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    return [tokenizer(text).input_ids for text in TEXTS]


def generate_alone(model, prompt, max_new_tokens, stops, output_logits=False):
    """The reference: ``model.generate`` on one unpadded prompt, greedy, cut before the first stop token."""
    with torch.inference_mode():
        out = model.generate(input_ids=torch.tensor([prompt]),
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long), do_sample=False,
                             max_new_tokens=max_new_tokens, eos_token_id=list(stops), pad_token_id=stops[0],
                             return_dict_in_generate=True, output_logits=output_logits)
    tokens = out.sequences[0, len(prompt):].tolist()
    cut = next((i for i, token in enumerate(tokens) if token in stops), len(tokens))
    return (tokens[:cut], out.logits) if output_logits else tokens[:cut]


def test_the_prompt_alone_is_decoded_bit_for_bit_as_model_generate_decodes_it(model, tokenizer, prompts):
    stops = default_stop_token_ids(model, tokenizer)
    tokens, logits = generate_alone(model, prompts[2], 12, stops, output_logits=True)
    with torch.inference_mode():
        decoder = AloneDecoder(model, prompts[2])
        for step, token in enumerate(tokens):
            assert torch.equal(decoder.logits, logits[step][0]), f"step {step}"
            decoder.feed([token])


@pytest.fixture(params=["rows join as others end", "fixed batches"])
def batching(request, monkeypatch):
    """Both ways of batching: prompts joining a running batch, and fixed batches (for caches that
    rows cannot join, such as sliding-window ones)."""
    if request.param == "fixed batches":
        growing_cache = generation._growing_cache
        monkeypatch.setattr(generation, "_growing_cache", lambda model: (growing_cache(model)[0], False))
    return request.param


@pytest.mark.parametrize("batch_size", [1, 2, 3, 16])
def test_batched_generation_equals_each_prompt_generated_alone(model, tokenizer, prompts, batch_size, batching):
    stops = default_stop_token_ids(model, tokenizer)
    expected = [generate_alone(model, prompt, 24, stops) for prompt in prompts]
    assert greedy_generate(model, tokenizer, prompts, max_new_tokens=24, batch_size=batch_size,
                           progress=False) == expected


def test_generation_stops_before_the_first_stop_token(model, tokenizer, prompts, batching):
    [free] = greedy_generate(model, tokenizer, prompts[:1], max_new_tokens=16, progress=False)
    stop = free[5]
    [stopped] = greedy_generate(model, tokenizer, prompts[:1], max_new_tokens=16, stop_token_ids=[stop],
                                progress=False)
    assert stopped == free[: free.index(stop)]
    stops = default_stop_token_ids(model, tokenizer) + [stop]  # prompts end at different steps, some at once
    expected = [generate_alone(model, prompt, 16, stops) for prompt in prompts]
    assert greedy_generate(model, tokenizer, prompts, max_new_tokens=16, stop_token_ids=stops, batch_size=3,
                           progress=False) == expected
    assert greedy_generate(model, tokenizer, prompts, max_new_tokens=0, progress=False) == [[]] * len(prompts)


def test_results_come_back_in_input_order_whatever_the_batching(model, tokenizer, prompts, batching):
    reordered = prompts[::-1] + prompts[:2]
    one_by_one = [greedy_generate(model, tokenizer, [prompt], max_new_tokens=6, progress=False)[0]
                  for prompt in reordered]
    assert greedy_generate(model, tokenizer, reordered, max_new_tokens=6, batch_size=4, progress=False) == one_by_one


@pytest.mark.parametrize("batch_size", [1, 3])
def test_each_response_is_reported_once_with_its_final_tokens(model, tokenizer, prompts, batching, batch_size):
    stops = default_stop_token_ids(model, tokenizer) + [greedy_generate(model, tokenizer, prompts[:1], max_new_tokens=8,
                                                                        progress=False)[0][3]]
    reported = []
    results = greedy_generate(model, tokenizer, prompts, max_new_tokens=8, stop_token_ids=stops, batch_size=batch_size,
                              progress=False, on_result=lambda index, tokens: reported.append((index, list(tokens))))
    assert sorted(reported) == sorted(enumerate(results))


def test_a_near_tie_the_batch_would_flip_is_settled_by_the_prompt_alone(model, tokenizer, prompts, batching):
    """A hook moves every batched logit by up to 0.05, as padding and batched products move them by
    up to ~1e-4 on a real model: unchecked, some tokens flip; with a margin above the move, none does."""
    stops = default_stop_token_ids(model, tokenizer)
    expected = [generate_alone(model, prompt, 24, stops) for prompt in prompts]
    noise = 0.05 * torch.sin(torch.arange(len(tokenizer), dtype=torch.float32) * 12.9898)

    def move_batched_logits(module, inputs, output):
        return output + noise if output.shape[0] > 1 else output

    handle = model.lm_head.register_forward_hook(move_batched_logits)
    try:
        unchecked = greedy_generate(model, tokenizer, prompts, max_new_tokens=24, batch_size=8, tie_margin=0,
                                    progress=False)
        checked = greedy_generate(model, tokenizer, prompts, max_new_tokens=24, batch_size=8, tie_margin=0.11,
                                  progress=False)
    finally:
        handle.remove()
    assert unchecked != expected
    assert checked == expected


def test_bad_arguments_raise_a_value_error_naming_the_prompt(model, tokenizer, prompts):
    with pytest.raises(ValueError, match="Prompt 1 has no tokens"):
        greedy_generate(model, tokenizer, [prompts[0], []], max_new_tokens=4, progress=False)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_generate(model, tokenizer, prompts, max_new_tokens=-1, progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        greedy_generate(model, tokenizer, prompts, max_new_tokens=4, batch_size=0, progress=False)
    with pytest.raises(ValueError, match="Prompt 0 has 500 tokens: with max_new_tokens=20 it needs 520 positions, "
                                         "and the model has 512"):
        greedy_generate(model, tokenizer, [[5] * 500], max_new_tokens=20, progress=False)


def test_stop_tokens_default_to_the_eos_of_the_tokenizer_and_of_the_generation_config(model, tokenizer):
    assert default_stop_token_ids(model, tokenizer) == sorted({tokenizer.eos_token_id,
                                                                model.generation_config.eos_token_id})


@pytest.mark.slow
def test_batched_generation_equals_generating_alone_on_real_ifeval_prompts():
    from hf_adapters.backends.loading import load_model
    from hf_adapters.ifeval.prompts import prompt_token_ids, read_prompts

    model, tokenizer = load_model()
    prompts = prompt_token_ids(tokenizer, read_prompts()[:4])
    stops = default_stop_token_ids(model, tokenizer)
    expected = [generate_alone(model, prompt, 32, stops) for prompt in prompts]
    assert greedy_generate(model, tokenizer, prompts, max_new_tokens=32, batch_size=4, progress=False) == expected


def test_every_forward_pass_runs_off_cudnn_attention_on_cuda(model, tokenizer, prompts, batching, monkeypatch):
    """cuDNN plans its attention kernel again for every new cache length (74% of the host's time in
    decoding on an H200, issue 51): on CUDA, generation keeps attention on the other kernels."""
    devices, off_cudnn = [], []
    original = generation.without_cudnn_attention

    def as_on_cuda(device):
        devices.append(device.type)
        return original(torch.device("cuda"))

    monkeypatch.setattr(generation, "without_cudnn_attention", as_on_cuda)
    hook = model.model.register_forward_pre_hook(
        lambda *_: off_cudnn.append(not torch.backends.cuda.cudnn_sdp_enabled()))
    try:
        greedy_generate(model, tokenizer, prompts[:4], max_new_tokens=6, stop_token_ids=[], batch_size=3,
                        progress=False)
    finally:
        hook.remove()
    assert devices == ["cpu"] and len(off_cudnn) >= 4 + 6 and all(off_cudnn)
    assert torch.backends.cuda.cudnn_sdp_enabled()
