"""What the datatrove step and the NeMo Curator stage share (hf_adapters.integrations.pipeline_scores): a config's
columns as the score files name them, bad rows as NaN with a warning, the filter's range."""

from __future__ import annotations

import logging
import math
import pickle

import pytest

from hf_adapters.integrations.pipeline_scores import PipelineScores, ScoreRange
from tests.conftest import write_config


def ifd_config(tmp_path, model_dir: str) -> str:
    return write_config(tmp_path / "ifd.yaml", f"name: IFDScorer\nmodel: {model_dir}\nmax_length: 128\n"
                                               "template: '{instruction}\\n{input}\\n'\n"
                                               "template_no_input: '{instruction}\\n'\n")


def test_a_row_after_a_refused_one_is_named_by_its_own_number_and_both_get_nan(tmp_path, model_dir, caplog):
    rows = [{"id": "a", "instruction": "Say hi.", "input": "", "output": "hi"},
            {"id": "b", "input": "", "output": "hi"},
            {"id": "c", "instruction": "Say hi.", "input": "", "output": ""}]
    with caplog.at_level(logging.WARNING, logger="hf_adapters"):
        scores = PipelineScores(ifd_config(tmp_path, model_dir)).columns_for(rows, first_row=10)
    assert scores["score"][0] > 0 and math.isnan(scores["score"][1]) and math.isnan(scores["score"][2])
    assert "Row 11 (id='b') has no field 'instruction'. Its scores are NaN." in caplog.text
    assert "Row 12 (id='c') has an empty output; its IFD is NaN." in caplog.text


def test_the_columns_are_named_as_the_score_files_name_them(tmp_path, model_dir):
    config = ifd_config(tmp_path, model_dir)
    assert PipelineScores(config).columns == {"ifd": "score"}
    assert PipelineScores(config, score_columns="all").columns == \
        {"ifd": "score", "ppl_conditional": "ppl_conditional", "ppl_direct": "ppl_direct"}
    with pytest.raises(ValueError, match="The scorer has no output 'upd'"):
        PipelineScores(config, score_columns=["upd"])


def test_the_scores_pickle_without_their_scorer(tmp_path, model_dir):
    scores = PipelineScores(ifd_config(tmp_path, model_dir))
    scores.load()
    assert pickle.loads(pickle.dumps(scores))._scorer is None


def test_the_range_keeps_its_bounds_and_never_a_nan_and_needs_one_bound():
    keep = ScoreRange(min_score=0.5, max_score=1.0)
    assert [keep(value) for value in (0.5, 1.0, 0.4, 1.1, math.nan, None)] == [True, True, False, False, False, False]
    with pytest.raises(ValueError, match="needs min_score, max_score or both"):
        ScoreRange()
    with pytest.raises(ValueError, match="min_score 2 is above max_score 1"):
        ScoreRange(2, 1)


def test_a_scorer_reading_a_field_it_does_not_declare_fails_in_the_engines_line(monkeypatch):
    """The pipelines gave a scorer every field of a row, where every engine gives it only its declared ones."""
    from hf_adapters.core.scored_rows import UndeclaredFieldError
    from hf_adapters.scorers import RowScorer
    from hf_adapters.scorers.base import SCORERS

    class WeightedLength(RowScorer):
        name = "WeightedLength"
        roles = {"output": "output"}
        text_roles = ("output",)

        def score_rows(self, rows, first_row=0):
            return [len(row["output"]) * row["weight"] for row in rows]

    monkeypatch.setitem(SCORERS, "WeightedLength", WeightedLength)
    rows = [{"id": i, "output": "ab" * i, "weight": 2} for i in range(3)]
    with pytest.raises(UndeclaredFieldError, match="^WeightedLength reads the field 'weight' of a row, which is not "
                                                   r"among the columns it declares \('output'\)"):
        PipelineScores({"name": "WeightedLength"}).columns_for(rows)
