"""What every scorer is: a validated config, the columns it reads, a batched call to named outputs.

A scorer is the one adapter between rows and a metric's formula. The evaluate modules, the
``Dataset.map`` helpers, the job runner behind ``hf-adapters score``, the demo and the Space all
call it; a new metric needs a formula module, one scorer and its evaluate module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
import yaml

from .. import models
from ..options import check_lengths

SCORERS: dict[str, type[RowScorer]] = {}


def register_scorer(cls: type[RowScorer]) -> type[RowScorer]:
    """Class decorator: make ``cls`` available under ``cls.name`` in configs."""
    SCORERS[cls.name] = cls
    return cls


def row_name(row: Mapping[str, Any], index: int) -> str:
    """How messages name a row: its index in the data, and its id when it has one."""
    return f"Row {index} (id={row['id']!r})" if row.get("id") not in (None, "") else f"Row {index}"


class ConfigError(ValueError):
    """A config names an unknown scorer or key, or lacks a required key."""


class RowScorer:
    """Base of all scorers: config keys in, named score columns out.

    Subclasses set ``name`` (the config's ``name``), ``options`` (config key -> default),
    ``roles`` (what each input column is -> its default column name; the config key
    ``{role}_column`` names another column), ``optional_roles`` (may be switched off with
    ``{role}_column=None``; a missing value reads as ""), ``text_roles`` (hold strings) and
    ``outputs`` (the output names; ``outputs[0]`` is the one score per row a job writes). They
    implement ``score_batch`` (columns in) or, with a single output, ``score_rows`` (rows in).
    """

    name: ClassVar[str]
    options: ClassVar[dict[str, Any]] = {}
    #: Keys a config may add beyond ``options`` (stored in ``config`` only when given).
    extra_options: ClassVar[dict[str, Any]] = {}
    roles: ClassVar[dict[str, str]] = {}
    optional_roles: ClassVar[tuple[str, ...]] = ()
    text_roles: ClassVar[tuple[str, ...]] = ()
    outputs: ClassVar[tuple[str, ...]] = ("score",)

    def __init__(self, **config: Any):
        column_keys = {f"{role}_column": role for role in self.roles}
        further = sorted({*self.extra_options, *column_keys})
        if unknown := sorted(set(config) - set(self.options) - set(further)):
            raise ConfigError(f"Unknown key(s) {unknown} for {self.name}; valid keys: {['name', *sorted(self.options)]}"
                              + (f", and the optional {further}" if further else ""))
        self.columns: dict[str, str | None] = dict(self.roles)
        for key, role in column_keys.items():
            if key in config:
                self.columns[role] = self._column_name(key, config.pop(key), role)
        self.config = {**self.options, **config}

    def _column_name(self, key: str, column: Any, role: str) -> str | None:
        if column is None and role in self.optional_roles:
            return None
        if not isinstance(column, str) or not column:
            raise ConfigError(f"{self.name}: `{key}` must be a column name, got {column!r}.")
        return column

    def setting(self, key: str) -> Any:
        """The value of an option or extra option: the config's, else the default."""
        return self.config.get(key, self.extra_options.get(key))

    @property
    def source_columns(self) -> list[str]:
        """The columns this scorer reads, in role order."""
        return [column for column in self.columns.values() if column is not None]

    @property
    def required_fields(self) -> tuple[str, ...]:
        return tuple(column for role, column in self.columns.items()
                     if column is not None and role not in self.optional_roles)

    @property
    def text_fields(self) -> tuple[str, ...]:
        return tuple(self.columns[role] for role in self.text_roles if self.columns[role] is not None)

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this scorer's results: its name, configuration and columns."""
        columns = {"columns": self.columns} if self.columns != self.roles else {}
        return {"name": self.name, **self.config, **columns}

    def check_rows(self, rows: Sequence[Mapping[str, Any]], offset: int = 0) -> None:
        """Raise a ValueError naming (by its index in the data, ``offset`` + position, and its id) the
        first row that lacks a required field or holds a non-string text field."""
        for i, row in enumerate(rows):
            for field in self.required_fields:
                if field not in row or row[field] is None:
                    raise ValueError(f"{row_name(row, offset + i)} has no field {field!r}.")
            for field in self.text_fields:
                if row.get(field) is not None and not isinstance(row[field], str):
                    raise ValueError(f"{row_name(row, offset + i)}: field {field!r} must be a string, "
                                     f"got {type(row[field]).__name__}.")

    def prepare(self) -> None:
        """Load what scoring needs (the model), so that a failure shows before any work starts."""

    def use_columns(self, column_names: Sequence[str]) -> None:
        """Adapt to the data's columns before its rows are checked (e.g. read ShareGPT's
        ``conversations`` where there is no ``messages``); by default, nothing to adapt."""

    def model_identity(self) -> dict[str, Any] | None:
        """What identifies the model by content (None: no model, or one passed as an object)."""
        return None

    def read_texts(self, batch: Mapping[str, list], first_row: int = 0) -> dict[str, list[str]]:
        """The strings of each text role in a batch of columns; optional roles read None (or no column) as ""."""
        texts = {}
        for role in self.text_roles:
            column = self.columns[role]
            if column is None:
                texts[role] = [""] * len(next(iter(batch.values()), []))
                continue
            if not isinstance(batch[column], list):
                raise TypeError("Scorers score whole batches: call `ds.map(scorer, batched=True)`.")
            values = []
            for row, value in enumerate(batch[column], first_row):
                if value is None and role in self.optional_roles:
                    value = ""
                if not isinstance(value, str):
                    raise TypeError(f"Row {row}: column {column!r} must hold a string, got {type(value).__name__}: "
                                    f"{value!r:.80}")
                values.append(value)
            texts[role] = values
        return texts

    def score_batch(self, batch: Mapping[str, list], first_row: int = 0) -> dict[str, list]:
        """``{output: one value per row}`` for a batch of columns (``first_row``: the batch's first row
        index in the data, for messages)."""
        count = len(batch[self.source_columns[0]]) if self.source_columns else len(next(iter(batch.values())))
        rows = [{column: values[i] for column, values in batch.items()} for i in range(count)]
        return {self.outputs[0]: self.score_rows(rows)}

    def score_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        """One score per row (``outputs[0]``); a ValueError names a row with a missing or non-string field."""
        return [float(value) for value in self.score_batch(self.rows_to_batch(rows))[self.outputs[0]]]

    def rows_to_batch(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, list]:
        """The checked rows as a batch of this scorer's columns (a missing optional field: None)."""
        self.check_rows(rows)
        return {column: [row.get(column) for row in rows] for column in self.source_columns}

    def __call__(self, batch: Mapping[str, list], indices: Sequence[int] | None = None) -> dict[str, list]:
        """``ds.map(scorer, batched=True, with_indices=True)`` adds the scorer's output columns."""
        return self.score_batch(batch, indices[0] if indices else 0)


class ModelRowScorer(RowScorer):
    """Base of scorers that run a model. ``model`` (a model id or path, or, as in transformers'
    ``pipeline``, a loaded model passed with its ``tokenizer``), ``max_length``, ``batch_size`` and
    ``dtype`` are config keys, checked when the scorer is built; ``device`` is not (it does not
    change scores). A model named by id is loaded, through
    :func:`hf_adapters.models.model_and_tokenizer`, on first use."""

    def __init__(self, *, tokenizer: Any = None, device: str | torch.device | None = None,
                 progress: bool | None = False, **config: Any):
        model = config.get("model", self.options.get("model"))
        self.model_object = None if isinstance(model, str) else model
        if (self.model_object is None) != (tokenizer is None):
            raise ValueError("Pass both `model` and `tokenizer`, or neither (then `model_id` is loaded).")
        if self.model_object is not None:
            config["model"] = getattr(model, "name_or_path", "") or type(model).__name__
        super().__init__(**config)
        if not isinstance(self.config["model"], str) or not self.config["model"]:
            raise ConfigError(f"{self.name}: `model` must be a model id or path, got {self.config['model']!r}.")
        try:
            check_lengths(self.config["max_length"], self.config["batch_size"])
            models.resolve_dtype(self.config["dtype"], torch.device("cpu"))
        except ValueError as error:
            raise ConfigError(f"{self.name}: {error}") from None
        self.tokenizer, self.device, self.progress = tokenizer, device, progress
        if self.token_outputs and self.setting("return_token_losses"):
            self.outputs = (*self.outputs, *self.token_outputs)
            self.result_keys = (*self.result_keys, *self.token_outputs)

    def load(self):
        """The caller's model and tokenizer, else the process-wide cached ``config["model"]``."""
        return models.model_and_tokenizer(self.config["model"], self.model_object, self.tokenizer,
                                          self.config["dtype"], self.device)

    def prepare(self) -> None:
        self.load()

    def model_identity(self) -> dict[str, Any] | None:
        """The model's files (sizes, times, first and last MiB) or hub commit, with the effective
        dtype and device type: see :func:`hf_adapters.models.model_identity`."""
        if self.model_object is not None:
            return None
        return models.model_identity(self.config["model"], self.config["dtype"], self.device)

    #: The keys of the formula's result holding the per-row lists of ``outputs``, in the same order.
    result_keys: ClassVar[tuple[str, ...]]
    #: Outputs (and result keys) added with the option ``return_token_losses``: per row, the scored
    #: tokens and their NLLs.
    token_outputs: ClassVar[tuple[str, ...]] = ()

    def result(self, texts: Mapping[str, Sequence[str]], first_row: int = 0) -> dict[str, Any]:
        """The formula's whole result (per-row lists and aggregates) for checked texts, by role."""
        raise NotImplementedError

    def read_inputs(self, batch: Mapping[str, list], first_row: int = 0) -> Any:
        """What :meth:`result` takes from a batch of columns: the texts of each role."""
        return self.read_texts(batch, first_row)

    def result_of_rows(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The formula's whole result for rows holding this scorer's columns."""
        return self.result(self.read_inputs(self.rows_to_batch(rows)))

    def score_batch(self, batch: Mapping[str, list], first_row: int = 0) -> dict[str, list]:
        result = self.result(self.read_inputs(batch, first_row), first_row)
        return {output: result[key] for output, key in zip(self.outputs, self.result_keys, strict=True)}


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
