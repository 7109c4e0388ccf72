"""Row scorers named by the seed YAML configs (``name: PPLScorer`` ...) and the registry that builds them.

A row scorer turns a list of data rows (dicts) into one float per row (NaN for a row that has no
score). The command line, the resumable job runner and the demo all go through this interface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
import yaml

from . import models
from .columns import ppl_text
from .ifd import DEFAULT_TEMPLATE, DEFAULT_TEMPLATE_NO_INPUT, check_templates, score_ifd
from .models import DEFAULT_MODEL_ID
from .options import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH, check_lengths
from .parity import compute_information_parity
from .perplexity import compute_perplexity

SCORERS: dict[str, type[RowScorer]] = {}


def register_scorer(cls: type[RowScorer]) -> type[RowScorer]:
    """Class decorator: make ``cls`` available under ``cls.name`` in configs."""
    SCORERS[cls.name] = cls
    return cls


class ConfigError(ValueError):
    """A config names an unknown scorer or key, or lacks a required key."""


class RowScorer:
    """Base of all row scorers: validated config keys in, one float per row out.

    Subclasses set ``name``, ``options`` (config key -> default; ``model`` and ``batch_size``
    included where they apply) and ``required_fields`` (row fields that must be present), and
    implement ``score_rows``.
    """

    name: ClassVar[str]
    options: ClassVar[dict[str, Any]] = {}
    required_fields: ClassVar[tuple[str, ...]] = ()
    #: Row fields that must hold a string where present (checked with the required fields).
    text_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **config: Any):
        unknown = sorted(set(config) - set(self.options))
        if unknown:
            raise ConfigError(
                f"Unknown key(s) {unknown} for {self.name}; valid keys: {['name', *sorted(self.options)]}"
            )
        self.config = {**self.options, **config}

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this scorer's results: its name and full configuration."""
        return {"name": self.name, **self.config}

    def check_rows(self, rows: Sequence[Mapping[str, Any]], offset: int = 0) -> None:
        """Raise a ValueError naming (by its index in the data, ``offset`` + position, and its id) the
        first row that lacks a required field or holds a non-string text field."""
        for i, row in enumerate(rows):
            for field in self.required_fields:
                if field not in row or row[field] is None:
                    raise ValueError(f"Row {offset + i} (id={row.get('id', '')!r}) has no field {field!r}.")
            for field in self.text_fields:
                if row.get(field) is not None and not isinstance(row[field], str):
                    raise ValueError(f"Row {offset + i} (id={row.get('id', '')!r}): field {field!r} must be a "
                                     f"string, got {type(row[field]).__name__}.")

    def prepare(self) -> None:
        """Load what scoring needs (the model), so that a failure shows before any work starts."""

    def score_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        raise NotImplementedError


def build_scorer(config: Mapping[str, Any], **overrides: Any) -> RowScorer:
    """Build the scorer a config dict names; ``overrides`` that are not None replace config keys."""
    config = dict(config)
    name = config.pop("name", None)
    if name not in SCORERS:
        raise ConfigError(f"Unknown scorer name {name!r}; valid names: {sorted(SCORERS)}")
    config.update({key: value for key, value in overrides.items() if value is not None})
    return SCORERS[name](**config)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a seed-style YAML config: a mapping with ``name`` and that scorer's keys."""
    with open(path, encoding="utf-8") as handle:
        try:
            config = yaml.safe_load(handle)
        except yaml.YAMLError as error:
            raise ConfigError(f"{path} is not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(config, dict) or "name" not in config:
        raise ConfigError(f"{path}: a config is a YAML mapping with a `name` key; valid names: {sorted(SCORERS)}")
    return config


def _check_lengths(scorer: RowScorer) -> None:
    try:
        check_lengths(scorer.config["max_length"], scorer.config["batch_size"])
    except ValueError as error:
        raise ConfigError(f"{scorer.name}: {error}") from None


def _check_dtype(scorer: RowScorer) -> None:
    try:
        models.resolve_dtype(scorer.config["dtype"], torch.device("cpu"))
    except ValueError as error:
        raise ConfigError(f"{scorer.name}: {error}") from None


class ModelRowScorer(RowScorer):
    """Base of scorers that run a model: ``model``, ``max_length``, ``batch_size`` and ``dtype`` are
    checked when the config is built; the model ``config["model"]`` is loaded on first use."""

    def __init__(self, **config: Any):
        super().__init__(**config)
        if not isinstance(self.config["model"], str) or not self.config["model"]:
            raise ConfigError(f"{self.name}: `model` must be a model id or path, got {self.config['model']!r}.")
        _check_lengths(self)
        _check_dtype(self)

    def load(self):
        """The model and tokenizer named by ``config["model"]``, loaded once per process."""
        return models.load_model(self.config["model"], dtype=self.config["dtype"])

    def prepare(self) -> None:
        self.load()


class InstructionRowScorer(ModelRowScorer):
    """Base of scorers of instruction rows: ``instruction`` and ``output`` required, ``input``
    optional (missing or None: empty)."""

    required_fields = ("instruction", "output")
    text_fields = ("instruction", "input", "output")

    def columns(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], list[str]]:
        """The rows' instructions, inputs and outputs; a ValueError names a row with a missing or non-string field."""
        self.check_rows(rows)
        return ([row["instruction"] for row in rows], [row.get("input") or "" for row in rows],
                [row["output"] for row in rows])


@register_scorer
class PPLScorer(InstructionRowScorer):
    """Perplexity of the non-empty instruction, input and output joined with newlines (lower: more
    predictable), as the perplexity metric computes it.

    Unlike the seed, which scores the text as the tokenizer encodes it (so without a BOS-adding
    tokenizer, e.g. Qwen or SmolLM2, the first token is never scored), the start token (BOS, else
    EOS) is put in front, so every token of the text is scored whatever the tokenizer.
    """

    name = "PPLScorer"
    options = {
        "model": DEFAULT_MODEL_ID, "max_length": DEFAULT_MAX_LENGTH, "batch_size": DEFAULT_BATCH_SIZE, "dtype": None,
    }

    def score_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        texts = [ppl_text(*row) for row in zip(*self.columns(rows), strict=True)]
        model, tokenizer = self.load()
        return compute_perplexity(
            texts, max_length=self.config["max_length"], batch_size=self.config["batch_size"],
            model=model, tokenizer=tokenizer,
        )["perplexities"]


@register_scorer
class IFDScorer(InstructionRowScorer):
    """Instruction-Following Difficulty, PPL(A|Q) / PPL(A), as the ``ifd`` metric computes it."""

    name = "IFDScorer"
    options = {
        "model": DEFAULT_MODEL_ID,
        "max_length": DEFAULT_MAX_LENGTH,
        "batch_size": DEFAULT_BATCH_SIZE,
        "dtype": None,
        "template": DEFAULT_TEMPLATE,
        "template_no_input": DEFAULT_TEMPLATE_NO_INPUT,
    }

    def __init__(self, **config: Any):
        super().__init__(**config)
        for key in ("template", "template_no_input"):
            if not isinstance(self.config[key], str):
                raise ConfigError(f"{self.name}: `{key}` must be a string, got {self.config[key]!r}.")
        try:
            check_templates(self.config["template"], self.config["template_no_input"])
        except ValueError as error:
            raise ConfigError(f"{self.name}: {error}") from None

    def score_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        instructions, inputs, outputs = self.columns(rows)
        model, tokenizer = self.load()
        return score_ifd(
            model, tokenizer, instructions, outputs, inputs,
            template=self.config["template"], template_no_input=self.config["template_no_input"],
            max_length=self.config["max_length"], batch_size=self.config["batch_size"],
        )["ifd_scores"]


@register_scorer
class IFEvalScorer(RowScorer):
    """IFEval prompt-level strict accuracy of one row: 1.0 if the response (``response_field``)
    follows every instruction in ``instruction_id_list`` with its ``kwargs``, else 0.0."""

    name = "IFEvalScorer"
    options = {"response_field": "response"}

    def __init__(self, **config: Any):
        super().__init__(**config)
        self.required_fields = ("instruction_id_list", "kwargs", self.config["response_field"])
        self.text_fields = (self.config["response_field"],)

    def check_rows(self, rows: Sequence[Mapping[str, Any]], offset: int = 0) -> None:
        """Also check every row's instruction ids and kwargs, naming the row."""
        from .ifeval.registry import build_checks

        super().check_rows(rows, offset)
        for i, row in enumerate(rows):
            build_checks(row["instruction_id_list"], row["kwargs"], row=offset + i, key=row.get("key", row.get("id")))

    def score_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        from .ifeval import ifeval_row_score

        self.check_rows(rows)
        return [ifeval_row_score(row, self.config["response_field"]) for row in rows]


@register_scorer
class InformationParityScorer(ModelRowScorer):
    """Row score NLL(``reference_field``) / NLL(``text_field``) for ``python -m hf_adapters score``.

    Example config::

        name: InformationParityScorer
        model: HuggingFaceTB/SmolLM2-135M-Instruct
        text_field: text
        reference_field: reference
    """

    name: ClassVar[str] = "InformationParityScorer"
    options: ClassVar[dict[str, Any]] = {
        "model": DEFAULT_MODEL_ID,
        "max_length": None,
        "batch_size": DEFAULT_BATCH_SIZE,
        "dtype": None,
        "text_field": "text",
        "reference_field": "reference",
    }

    required_fields: ClassVar[tuple[str, ...]] = ("text", "reference")

    def __init__(self, **config: Any):
        super().__init__(**config)
        self.required_fields = (self.config["text_field"], self.config["reference_field"])
        self.text_fields = self.required_fields

    def score_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        self.check_rows(rows)
        texts = [row[self.config["text_field"]] for row in rows]
        references = [row[self.config["reference_field"]] for row in rows]
        result = compute_information_parity(
            texts, references, model_id=self.config["model"], batch_size=self.config["batch_size"],
            dtype=self.config["dtype"],
            max_length=self.config["max_length"],
        )
        return result["scores"]
