"""Perplexity and IFD columns through `Dataset.map`: the metric's numbers, and datasets' cache."""

import importlib
import inspect
import logging
import math
import pkgutil

import pytest
from datasets import Dataset, DatasetDict, load_from_disk

import hf_adapters.columns as columns
from hf_adapters.columns.dataset_columns import add_ifd_column, add_information_parity_column, add_perplexity_column
from hf_adapters.core.texts import ppl_text
from hf_adapters.formulas.ifd import compute_ifd
from hf_adapters.formulas.perplexity import compute_perplexity
from hf_adapters.scorers import IFDScorer, PerplexityScorer
from tests.conftest import build_model, job_rows
from tests.formulas.test_ifd import INPUTS, INSTRUCTIONS, OUTPUTS

ROWS = {"instruction": INSTRUCTIONS, "input": INPUTS, "output": OUTPUTS}


@pytest.fixture
def disk_dataset(tmp_path):
    """A dataset backed by files, so that datasets' cache is active."""
    Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "rows"))
    return load_from_disk(str(tmp_path / "rows"))


def test_ppl_text_joins_the_non_empty_parts_with_newlines():
    assert ppl_text("Do it.", "", "Done.") == "Do it.\nDone."
    assert ppl_text("Do it.", None, "Done.") == "Do it.\nDone."
    assert ppl_text("Do it.", "Now.", "Done.") == "Do it.\nNow.\nDone."


@pytest.mark.parametrize("mode", ["ppl_ratio", "loss_ratio"])
def test_ifd_column_equals_the_metric(model, tokenizer, load_calls, mode):
    ds = add_ifd_column(Dataset.from_dict(ROWS), model_id="tiny", mode=mode, batch_size=2)
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, mode=mode)
    assert ds["ifd"] == pytest.approx(expected["ifd_scores"], rel=1e-6)
    assert ds["ppl_conditional"] == pytest.approx(expected["conditional_perplexities"], rel=1e-6)
    assert ds["ppl_direct"] == pytest.approx(expected["direct_perplexities"], rel=1e-6)
    assert load_calls == ["tiny"]


@pytest.mark.parametrize("convention", ["cherry", "superfiltering", "opendataarena"])
def test_ifd_column_with_a_peer_convention_equals_the_metric_with_it(model, tokenizer, load_calls, convention):
    ds = add_ifd_column(Dataset.from_dict(ROWS), model_id="tiny", convention=convention, batch_size=2)
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, convention=convention)
    assert ds["ifd"] == pytest.approx(expected["ifd_scores"], rel=1e-6, nan_ok=True)
    assert ds["ppl_conditional"] == pytest.approx(expected["conditional_perplexities"], rel=1e-6, nan_ok=True)
    assert ds["ppl_direct"] == pytest.approx(expected["direct_perplexities"], rel=1e-6, nan_ok=True)


def test_a_peer_convention_is_not_a_cache_hit_of_the_exact_scores(disk_dataset, load_calls):
    exact = add_ifd_column(disk_dataset, model_id="tiny")
    assert add_ifd_column(disk_dataset, model_id="tiny", convention="exact")._fingerprint == exact._fingerprint
    assert load_calls == ["tiny"]
    peer = add_ifd_column(disk_dataset, model_id="tiny", convention="superfiltering")
    assert peer._fingerprint != exact._fingerprint and load_calls == ["tiny", "tiny"]


def test_conversations_refuse_a_peer_convention(load_calls):
    with pytest.raises(ValueError, match="convention='exact'"):
        add_ifd_column(Dataset.from_dict({"messages": [[]]}), messages_column="messages", convention="cherry")
    assert load_calls == []


def test_ifd_mapper_works_directly_in_map_with_small_batches(model, tokenizer):
    mapper = IFDScorer(model=model, tokenizer=tokenizer, max_length=72)
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer, max_length=72)
    with_indices = Dataset.from_dict(ROWS).map(mapper, batched=True, batch_size=2, with_indices=True)
    without = Dataset.from_dict(ROWS).map(mapper, batched=True, batch_size=3)
    assert with_indices["ifd"] == pytest.approx(expected["ifd_scores"], rel=1e-6)
    assert without["ifd"] == pytest.approx(expected["ifd_scores"], rel=1e-6)


def test_perplexity_column_equals_the_perplexity_metric_on_the_seed_text(model, tokenizer, load_calls):
    ds = add_perplexity_column(Dataset.from_dict(ROWS), model_id="tiny")
    texts = [ppl_text(*row) for row in zip(INSTRUCTIONS, INPUTS, OUTPUTS, strict=True)]
    expected = compute_perplexity(texts, model=model, tokenizer=tokenizer)["perplexities"]
    assert ds["perplexity"] == pytest.approx(expected, rel=1e-6)


def test_mapper_without_batched_is_a_clear_error(model, tokenizer):
    with pytest.raises(TypeError, match="batched=True"):
        Dataset.from_dict(ROWS).map(IFDScorer(model=model, tokenizer=tokenizer))


def test_perplexity_column_of_a_named_text_column(model, tokenizer):
    ds = Dataset.from_dict({"text": OUTPUTS + [""]})
    mapped = ds.map(PerplexityScorer(text_column="text", model=model, tokenizer=tokenizer), batched=True, batch_size=2)
    expected = compute_perplexity(OUTPUTS + [""], model=model, tokenizer=tokenizer)["perplexities"]
    assert mapped["perplexity"][:-1] == pytest.approx(expected[:-1], rel=1e-6)
    assert math.isnan(mapped["perplexity"][-1])


def test_column_and_field_names_are_configurable(model, tokenizer, load_calls):
    ds = Dataset.from_dict({"q": INSTRUCTIONS, "ctx": INPUTS, "a": OUTPUTS})
    scored = add_ifd_column(ds, instruction_column="q", input_column="ctx", output_column="a", ifd_column="d",
                            conditional_column="c", direct_column="u", model_id="tiny")
    scored = add_perplexity_column(scored, instruction_column="q", input_column="ctx", output_column="a",
                                   column="p", model_id="tiny")
    assert scored.column_names == ["q", "ctx", "a", "d", "c", "u", "p"]
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, INPUTS, model=model, tokenizer=tokenizer)
    assert scored["d"] == pytest.approx(expected["ifd_scores"], rel=1e-6)


def test_data_without_inputs_uses_input_column_none(model, tokenizer, load_calls):
    ds = Dataset.from_dict({"instruction": INSTRUCTIONS, "output": OUTPUTS})
    with pytest.raises(ValueError, match="'input' not found.*input_column=None"):
        add_ifd_column(ds, model_id="tiny")
    scored = add_ifd_column(ds, input_column=None, model_id="tiny")
    expected = compute_ifd(INSTRUCTIONS, OUTPUTS, model=model, tokenizer=tokenizer)
    assert scored["ifd"] == pytest.approx(expected["ifd_scores"], rel=1e-6)


@pytest.mark.parametrize("add", [add_ifd_column, add_perplexity_column])
def test_missing_column_is_an_error_naming_it(add, load_calls):
    ds = Dataset.from_dict({"instruction": INSTRUCTIONS, "input": INPUTS, "answer": OUTPUTS})
    with pytest.raises(ValueError, match="Column 'output' not found"):
        add(ds, model_id="tiny")
    assert load_calls == []


def test_missing_text_column_is_an_error_naming_it(load_calls):
    with pytest.raises(ValueError, match="Column 'text' not found"):
        add_perplexity_column(Dataset.from_dict(ROWS), text_column="text", model_id="tiny")


@pytest.mark.parametrize("add", [add_ifd_column, add_perplexity_column])
def test_a_missing_value_is_an_error_naming_row_and_column(add, load_calls):
    ds = Dataset.from_dict({"instruction": INSTRUCTIONS, "input": INPUTS, "output": OUTPUTS[:3] + [None, "x"]})
    with pytest.raises(TypeError, match="Row 3: column 'output' must hold a string"):
        add(ds, model_id="tiny", batch_size=2)


def test_dataset_dict_gets_the_columns_in_every_split(load_calls):
    dd = DatasetDict({"train": Dataset.from_dict(ROWS), "test": Dataset.from_dict(ROWS).select([0, 1])})
    scored = add_ifd_column(dd, model_id="tiny")
    assert scored["test"]["ifd"] == pytest.approx(scored["train"]["ifd"][:2], rel=1e-6)


def test_rerunning_the_same_call_is_a_cache_hit_that_loads_no_model(disk_dataset, load_calls):
    first = add_ifd_column(disk_dataset, model_id="tiny")
    assert load_calls == ["tiny"]
    second = add_ifd_column(disk_dataset, model_id="tiny", batch_size=3)  # batch size does not change scores
    assert load_calls == ["tiny"]
    assert second._fingerprint == first._fingerprint
    assert second["ifd"] == first["ifd"]
    add_ifd_column(disk_dataset, model_id="tiny", mode="loss_ratio")
    assert load_calls == ["tiny", "tiny"]


def test_a_data_set_built_in_memory_is_scored_again_not_read_from_the_cache(load_calls, monkeypatch):
    """datasets keeps no cache for a data set without cache files, as the README says beside the claim
    of cache hits. Round five, item 23."""
    calls = []
    result = IFDScorer.result
    monkeypatch.setattr(IFDScorer, "result", lambda self, *a, **k: calls.append(1) or result(self, *a, **k))
    in_memory = Dataset.from_dict(ROWS)
    assert in_memory.cache_files == []
    first = add_ifd_column(in_memory, model_id="tiny")
    again = add_ifd_column(in_memory, model_id="tiny")
    assert len(calls) == 2 and again["ifd"] == first["ifd"]


def test_rerunning_perplexity_is_a_cache_hit_that_loads_no_model(disk_dataset, load_calls):
    first = add_perplexity_column(disk_dataset, model_id="tiny")
    second = add_perplexity_column(disk_dataset, model_id="tiny")
    assert load_calls == ["tiny"]
    assert second["perplexity"] == first["perplexity"]
    add_perplexity_column(disk_dataset, model_id="other")
    assert load_calls == ["tiny", "other"]


def test_a_model_object_is_not_cached_unless_named(disk_dataset, model, tokenizer):
    first = add_ifd_column(disk_dataset, model=model, tokenizer=tokenizer)
    second = add_ifd_column(disk_dataset, model=model, tokenizer=tokenizer)
    assert first._fingerprint != second._fingerprint
    named = add_ifd_column(disk_dataset, model=model, tokenizer=tokenizer, new_fingerprint="tiny0ifd")
    assert named._fingerprint == "tiny0ifd"
    assert named["ifd"] == pytest.approx(first["ifd"], rel=1e-6)


def test_bad_options_fail_before_any_model_is_loaded(load_calls):
    with pytest.raises(ValueError, match="valid modes"):
        add_ifd_column(Dataset.from_dict(ROWS), model_id="tiny", mode="ratio")
    with pytest.raises(ValueError, match="both `model` and `tokenizer`"):
        IFDScorer(model=object())
    assert load_calls == []


def test_a_zero_row_dataset_gets_the_new_columns_empty(load_calls):
    empty = Dataset.from_dict({"instruction": [], "input": [], "output": []})
    assert add_ifd_column(empty, model_id="tiny").column_names[-3:] == ["ifd", "ppl_conditional", "ppl_direct"]
    scored = add_perplexity_column(empty, model_id="tiny")
    assert scored.num_rows == 0 and scored.column_names[-1] == "perplexity"
    assert scored.features["perplexity"].dtype == "float64"
    pairs = add_information_parity_column(Dataset.from_dict({"text": [], "reference": []}), prediction_column="text",
                                          reference_column="reference", model_id="tiny")
    assert pairs.column_names == ["text", "reference", "information_parity"]
    assert load_calls == []


def test_num_proc_above_one_scores_in_this_process_and_says_so(model, tokenizer, caplog):
    ds = Dataset.from_dict({"text": ["The sea.", "A fox.", "Cats."]})
    expected = compute_perplexity(ds["text"], model=model, tokenizer=tokenizer)["perplexities"]
    scored = add_perplexity_column(ds, text_column="text", model=model, tokenizer=tokenizer, num_proc=2)
    assert scored["perplexity"] == pytest.approx(expected, rel=1e-6)
    assert "num_proc=2 is ignored" in caplog.text


def test_new_weights_at_the_same_model_path_are_not_a_cache_hit(disk_dataset, tmp_path, tokenizer):
    folder = tmp_path / "model"
    build_model(len(tokenizer), seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    first = add_perplexity_column(disk_dataset, model_id=str(folder))
    again = add_perplexity_column(disk_dataset, model_id=str(folder))
    assert again._fingerprint == first._fingerprint
    build_model(len(tokenizer), seed=1).save_pretrained(folder)  # same path, other weights
    second = add_perplexity_column(disk_dataset, model_id=str(folder))
    assert second._fingerprint != first._fingerprint
    assert second["perplexity"] != pytest.approx(first["perplexity"], rel=1e-3)


# --- From the round-three and round-four reviews ---------------------------------------------------------------

def test_add_ifd_column_refuses_output_names_that_collide(model, tokenizer):
    """From the round-three review: silently wrong."""
    ds = Dataset.from_dict({"instruction": ["Say hi."], "input": [""], "output": ["Hi!"]})
    with pytest.raises(ValueError, match="ppl_direct"):
        add_ifd_column(ds, ifd_column="ppl_direct", model=model, tokenizer=tokenizer)


def test_token_loss_columns_survive_a_first_batch_of_empty_rows(model, tokenizer):
    """From the round-three review: jobs that never finish."""
    ds = Dataset.from_dict({"text": [""] * 1000 + ["The quick brown fox."]})
    scored = add_perplexity_column(ds, text_column="text", return_token_losses=True, model=model,
                                   tokenizer=tokenizer)
    assert scored[1000]["token_losses"] and scored[1000]["tokens"]
    assert scored[0]["token_losses"] == []


#: A conversation of one user turn and one assistant turn.
CONVERSATIONS = [
    [{"role": "user", "content": "Write a short poem about the sea."}, {"role": "assistant", "content": "Waves."}],
]


def test_turn_ifd_survives_a_first_batch_of_unscorable_conversations(model, tokenizer, caplog):
    """From the round-three review: jobs that never finish."""
    no_assistant = [{"role": "user", "content": "Hello?"}]
    ds = Dataset.from_dict({"messages": [no_assistant] * 1000 + [CONVERSATIONS[0]]})
    with caplog.at_level(logging.ERROR):  # 1,000 warnings, one per unscorable row
        scored = add_ifd_column(ds, messages_column="messages", model=model, tokenizer=tokenizer)
    assert len(scored[1000]["turn_ifd"]) == 1 and math.isfinite(scored[1000]["ifd"])
    assert scored[0]["turn_ifd"] == []


def test_a_dataset_map_warning_names_the_row_by_its_id(model, tokenizer, caplog):
    """From the round-four review, case 15."""
    rows = job_rows()[16:]
    ds = Dataset.from_list(rows)
    with caplog.at_level(logging.WARNING):
        add_ifd_column(ds, model=model, tokenizer=tokenizer)
    assert "Row 5 (id='sample-22') has an empty output" in caplog.text


def test_a_misspelt_option_names_the_helpers_valid_options(model, tokenizer):
    ds = Dataset.from_dict({"instruction": ["Say hi."], "input": [""], "output": ["Hi!"]})
    with pytest.raises((TypeError, ValueError)) as info:
        add_ifd_column(ds, max_lenght=512, model=model, tokenizer=tokenizer)
    message = str(info.value)
    assert "max_lenght" in message and "max_length" in message and "Dataset.map()" not in message


def test_every_public_add_function_of_the_columns_modules_is_exported_by_the_columns_package():
    helpers = {name for info in pkgutil.iter_modules(columns.__path__)
               for name, value in inspect.getmembers(importlib.import_module(f"{columns.__name__}.{info.name}"),
                                                     inspect.isfunction)
               if name.startswith("add_") and value.__module__ == f"{columns.__name__}.{info.name}"}
    assert helpers and helpers == set(columns.__all__)
    assert all(getattr(columns, name) is not None for name in helpers)
