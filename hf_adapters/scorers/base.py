"""What every scorer is: a validated config, the columns it reads, a batched call to named outputs.

A scorer is the one adapter between rows and a metric's formula. The evaluate modules, the
``Dataset.map`` helpers, the job runner behind ``hf-adapters score``, the demo and the Space all
call it; a new metric needs a formula module, one scorer and its evaluate module.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
import yaml

from hf_adapters.backends import BackendOptions, LikelihoodBackend, TransformersBackend
from hf_adapters.backends import loading as models
from hf_adapters.core.options import OptionSpec, partition_options
from hf_adapters.core.plugins import SCORER_GROUP
from hf_adapters.core.registry import Registry

#: The backend of a config without a ``backend`` key.
BACKEND_DEFAULT = TransformersBackend.name


def row_name(row: Mapping[str, Any], index: int) -> str:
    """How messages name a row: its index in the data, and its id when it has one."""
    return f"Row {index} (id={row['id']!r})" if row.get("id") not in (None, "") else f"Row {index}"


def row_labels(batch: Mapping[str, list], first_row: int = 0) -> list[str]:
    """How messages name each row of a batch of columns (:func:`row_name`): its index in the data,
    counting from ``first_row``, and its id where the batch has an ``id`` column."""
    ids = batch["id"] if "id" in batch else [None] * len(next(iter(batch.values()), []))
    return [row_name({"id": row_id}, index) for index, row_id in enumerate(ids, first_row)]


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
    #: The type of each output that is not a float: ``"bool"``, or a list of ``["float64"]`` etc.
    output_types: ClassVar[dict[str, Any]] = {}
    #: The outputs a job writes under their own names instead of ``outputs[0]`` as ``score`` (a score
    #: set's members' first outputs); none for one scorer.
    named_outputs: tuple[str, ...] = ()
    #: Whether scoring runs a model (and so takes a ``device``).
    runs_model: ClassVar[bool] = False
    #: Whether it can score with a score set's one causal LM (a reward model's scorer cannot).
    joins_score_sets: ClassVar[bool] = True

    def __init__(self, **config: Any):
        column_keys = {f"{role}_column": role for role in self.roles}
        keys, further = self.config_keys()
        if unknown := sorted(set(config) - set(self.options) - set(further)):
            raise ConfigError(f"Unknown key(s) {unknown} for {self.name}; valid keys: {keys}"
                              + (f", and the optional {further}" if further else ""))
        self.columns: dict[str, str | None] = dict(self.roles)
        for key, role in column_keys.items():
            if key in config:
                self.columns[role] = self._column_name(key, config.pop(key), role)
        self.config = {**self.options, **config}

    @classmethod
    def config_keys(cls) -> tuple[list[str], list[str]]:
        """The keys a config may give: ``name`` and the options, and the optional ones (``extra_options``
        and each role's ``{role}_column``), each sorted."""
        return ["name", *sorted(cls.options)], sorted({*cls.extra_options, *(f"{role}_column" for role in cls.roles)})

    def _column_name(self, key: str, column: Any, role: str) -> str | None:
        if column is None and role in self.optional_roles:
            return None
        if not isinstance(column, str) or not column:
            raise ConfigError(f"{self.name}: `{key}` must be a column name, got {column!r}.")
        return column

    def output_features(self) -> dict[str, Any]:
        """Each output's ``datasets`` feature (float64 unless ``output_types`` says otherwise)."""
        from datasets import Sequence, Value

        kinds = {output: self.output_types.get(output, "float64") for output in self.outputs}
        return {output: Sequence(Value(kind[0])) if isinstance(kind, list) else Value(kind)
                for output, kind in kinds.items()}

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
        first row that lacks a required field or holds a non-string text field (after adapting to the
        rows' fields, as :meth:`use_columns` does)."""
        self.use_columns(list(dict.fromkeys(field for row in rows for field in row)))
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

    def measured_choices(self) -> dict[str, Any]:
        """What the backend has chosen by measuring (see :meth:`LikelihoodBackend.measured_choices`); none here."""
        return {}

    def reuse_measured_choices(self, choices: Mapping[str, Any]) -> None:
        """Make an earlier run's :meth:`measured_choices`; nothing to make here."""

    def read_texts(self, batch: Mapping[str, list], first_row: int = 0) -> dict[str, list[str]]:
        """The strings of each text role in a batch of columns; optional roles read None (or no column) as "".
        A TypeError names a row holding something else (:func:`row_labels`)."""
        texts = {}
        for role in self.text_roles:
            column = self.columns[role]
            if column is None:
                texts[role] = [""] * len(next(iter(batch.values()), []))
                continue
            if not isinstance(batch[column], list):
                raise TypeError("Scorers score whole batches: call `ds.map(scorer, batched=True)`.")
            values = []
            for position, value in enumerate(batch[column]):
                if value is None and role in self.optional_roles:
                    value = ""
                if not isinstance(value, str):
                    raise TypeError(f"{row_labels(batch, first_row)[position]}: column {column!r} must hold a string, "
                                    f"got {type(value).__name__}: {value!r:.80}")
                values.append(value)
            texts[role] = values
        return texts

    def score_batch(self, batch: Mapping[str, list], first_row: int = 0) -> dict[str, list]:
        """``{output: one value per row}`` for a batch of columns (``first_row``: the batch's first row
        index in the data, for messages)."""
        count = len(batch[self.source_columns[0]]) if self.source_columns else len(next(iter(batch.values())))
        rows = [{column: values[i] for column, values in batch.items()} for i in range(count)]
        return {self.outputs[0]: self.score_rows(rows)}

    def score_rows(self, rows: Sequence[Mapping[str, Any]], first_row: int = 0) -> list[float]:
        """One score per row (``outputs[0]``); a ValueError names a row with a missing or non-string field
        (``first_row``: the first row's index in the data, for messages)."""
        batch = self.rows_to_batch(rows, first_row)
        return [float(value) for value in self.score_batch(batch, first_row)[self.outputs[0]]]

    def score_rows_from(self, rows: Sequence[Mapping[str, Any]], first_row: int) -> list[float]:
        """:meth:`score_rows` of rows that begin at row ``first_row`` of the data, as a job scores a
        chunk; a subclass's ``score_rows`` that takes no ``first_row`` gets the rows alone."""
        if "first_row" in inspect.signature(self.score_rows).parameters:
            return self.score_rows(rows, first_row=first_row)
        return self.score_rows(rows)

    def rows_to_batch(self, rows: Sequence[Mapping[str, Any]], first_row: int = 0) -> dict[str, list]:
        """The rows, checked (``first_row``: the first one's index in the data, for messages), as a batch
        of columns: this scorer's (a missing optional field: None) and every other field of the rows
        (an ``id`` names its row in messages)."""
        self.check_rows(rows, first_row)
        columns = dict.fromkeys([*self.source_columns, *(field for row in rows for field in row)])
        return {column: [row.get(column) for row in rows] for column in columns}

    def __call__(self, batch: Mapping[str, list], indices: Sequence[int] | None = None) -> dict[str, list]:
        """``ds.map(scorer, batched=True, with_indices=True)`` adds the scorer's output columns."""
        return self.score_batch(batch, indices[0] if indices else 0)


#: Scorer classes by the name a config's ``name:`` key gives (a :class:`Registry`).
SCORERS: Registry[RowScorer] = Registry("scorer", RowScorer, group=SCORER_GROUP, where_named="in the config",
                                        guide="docs/guides/adding_a_score.md", unknown_error=ConfigError)
#: Make a class available under ``cls.name`` in configs (a class decorator); a ValueError for a class
#: without a name, or with a built-in scorer's name (``PPLScorer``...).
register_scorer = SCORERS.register
#: The package's own scorers, whose names no other class may take; filled once ``hf_adapters.scorers``
#: has registered them all.
BUILTIN_SCORERS = SCORERS.builtins


class ModelRowScorer(RowScorer):
    """Base of scorers that run a model. The config keys are ``model`` (a model id or path, or, as
    in transformers' ``pipeline``, a loaded model passed with its ``tokenizer``), ``batch_size``,
    ``max_batch_tokens`` (the transformers backend's token budget), ``dtype``, ``backend`` (a registered
    backend's name, or a :class:`~hf_adapters.backends.LikelihoodBackend` passed from Python) and every
    option of the metric's ``option_spec``, all checked when the scorer is built; ``device`` and
    ``progress`` are not config keys (they do not change scores). The backend is loaded on first use.

    Subclasses set ``option_spec`` (the metric's options), ``seed_keys`` (the options every config
    holds, as the seed's YAML configs do) and ``option_defaults`` (defaults of their own).
    """

    option_spec: ClassVar[type[OptionSpec]]
    seed_keys: ClassVar[tuple[str, ...]] = ("max_length",)
    runs_model = True
    option_defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "option_spec"):
            return
        defaults = cls.option_spec.build(cls.option_defaults).resolved()
        cls.options = {"model": models.DEFAULT_MODEL_ID, "batch_size": None, "dtype": None,
                       **{key: defaults[key] for key in cls.seed_keys}}
        cls.extra_options = {"backend": BACKEND_DEFAULT, "max_batch_tokens": None,
                             **{key: value for key, value in defaults.items() if key not in cls.seed_keys}}

    def __init__(self, *, tokenizer: Any = None, device: str | torch.device | None = None,
                 progress: bool | None = False, **config: Any):
        model, backend = config.get("model", self.options["model"]), config.get("backend")
        model_object = None if isinstance(model, str) or model is None else model
        backend_object = backend if isinstance(backend, LikelihoodBackend) else None
        if model_object is not None:
            config["model"] = getattr(model, "name_or_path", "") or type(model).__name__
        if backend_object is not None:
            config["backend"] = backend_object.name or type(backend_object).__name__
        super().__init__(**config)
        if not isinstance(self.config["model"], str) or not self.config["model"]:
            raise ConfigError(f"{self.name}: `model` must be a model id or path, got {self.config['model']!r}.")
        given = {key: value for key, value in config.items() if key in self.option_spec.names()}
        try:
            self.spec = self.option_spec.build({**self.option_defaults, **given})
            self.check_spec()
            self.run = BackendOptions(
                backend=backend_object or self.config.get("backend"), model_id=self.config["model"],
                model=model_object, tokenizer=tokenizer, dtype=self.config["dtype"], device=device,
                batch_size=self.config["batch_size"], max_batch_tokens=self.config.get("max_batch_tokens"),
                progress=progress,
            )
        except (ValueError, TypeError) as error:
            raise ConfigError(f"{self.name}: {error}") from None
        # The config says what the scores depend on: the seed keys, and the other options that are given
        # or resolved to other values than their defaults (so that naming a default changes no fingerprint).
        values = {**self.spec.resolved(), "backend": self.config.get("backend") or BACKEND_DEFAULT,
                  "max_batch_tokens": self.config.get("max_batch_tokens")}
        given = self.spec.given()
        self.config = {**{key: self.config[key] for key in ("model", "batch_size", "dtype")},
                       **{key: values[key] for key in self.seed_keys},
                       **{key: values[key] for key, default in self.extra_options.items()
                          if key in given or values[key] != default}}
        self._backend: LikelihoodBackend | None = None
        if self.token_outputs and values.get("return_token_losses"):
            self.outputs = (*self.outputs, *self.token_outputs)
            self.result_keys = (*self.result_keys, *self.token_outputs)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, caller: str | None = None, **config: Any) -> ModelRowScorer:
        """The scorer for an entry point's keyword ``options``: those of
        :class:`~hf_adapters.backends.BackendOptions` (``model_id``, or ``model`` and ``tokenizer``, or
        ``backend``; ``dtype``, ``device``, ``batch_size``, ``progress``) and those of the metric's spec;
        ``config`` adds config keys (columns). An unknown option is a ValueError naming ``caller``."""
        run, metric, _ = partition_options(options, BackendOptions.names(), cls.option_spec.names(),
                                           caller=caller or cls.name)
        model_id, model = run.pop("model_id", models.DEFAULT_MODEL_ID), run.pop("model", None)
        return cls(model=model_id if model is None else model, **run, **metric, **config)

    def check_spec(self) -> None:
        """Raise a ValueError for options this scorer's rows do not take (see the spec's ``check_rows``)."""
        self.spec.check_rows()

    @property
    def model_object(self) -> Any:
        """The loaded model the caller passed, if any."""
        return self.run.model

    @property
    def progress(self) -> bool | None:
        return self.run.progress

    def load(self) -> LikelihoodBackend:
        """The backend: the caller's, or one around the caller's model, else the process-wide cached
        ``config["model"]`` on the configured backend; loaded once per scorer."""
        if self._backend is None:
            self._backend = self.run.load()
        return self._backend

    def prepare(self) -> None:
        self.load()

    def measured_choices(self) -> dict[str, Any]:
        return self.load().measured_choices()

    def reuse_measured_choices(self, choices: Mapping[str, Any]) -> None:
        self.load().reuse_measured_choices(choices)

    def model_identity(self) -> dict[str, Any] | None:
        """What scores: the model's files (sizes, times, first and last MiB) or hub commit, with the
        effective dtype and device type (see :func:`hf_adapters.backends.loading.model_identity`), or a
        backend's own identity; None for a model object. Nothing is loaded."""
        return self.run.identity()

    #: The keys of the formula's result holding the per-row lists of ``outputs``, in the same order.
    result_keys: ClassVar[tuple[str, ...]]
    #: Outputs (and result keys) added with the option ``return_token_losses``: per row, the scored
    #: tokens and their NLLs.
    token_outputs: ClassVar[tuple[str, ...]] = ()

    def result(self, texts: Mapping[str, Sequence[str]], labels: Sequence[str] | None = None) -> dict[str, Any]:
        """The formula's whole result (per-row lists and aggregates) for checked texts, by role;
        ``labels`` name the rows in warnings (default ``Row 0``, ``Row 1``...)."""
        raise NotImplementedError

    def read_inputs(self, batch: Mapping[str, list], first_row: int = 0) -> Any:
        """What :meth:`result` takes from a batch of columns: the texts of each role."""
        return self.read_texts(batch, first_row)

    def result_of_rows(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The formula's whole result for rows holding this scorer's columns."""
        batch = self.rows_to_batch(rows)
        return self.result(self.read_inputs(batch), row_labels(batch))

    def score_batch(self, batch: Mapping[str, list], first_row: int = 0) -> dict[str, list]:
        result = self.result(self.read_inputs(batch, first_row), row_labels(batch, first_row))
        return {output: result[key] for output, key in zip(self.outputs, self.result_keys, strict=True)}


def scorer_class(config: Mapping[str, Any]) -> type[RowScorer]:
    """The scorer class a config names: a registered one, else the one an installed package declares
    under that name in the entry point group :data:`SCORER_GROUP` (imported now, and registered).
    ``name: IFDScorer`` with a ``turns`` key names ``ConversationIFDScorer``: IFD of conversations; a config
    with ``scores`` and no ``name`` names ``ScoreSet``."""
    name = config.get("name", "ScoreSet" if "scores" in config else None)
    if name == "IFDScorer" and "turns" in config:
        name = "ConversationIFDScorer"
    return SCORERS.lookup(name)


def scorer_names() -> list[str]:
    """The names a config may give: the registered scorers' and the entry points' of :data:`SCORER_GROUP`."""
    return SCORERS.names()


def build_scorer(config: Mapping[str, Any], **overrides: Any) -> RowScorer:
    """Build the scorer a config dict names (:func:`scorer_class`); ``overrides`` that are not None
    replace config keys."""
    cls = scorer_class(config)
    config = {key: value for key, value in config.items() if key != "name"}
    config.update({key: value for key, value in overrides.items() if value is not None})
    return cls(**config)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a seed-style YAML config: a mapping with ``name`` and that scorer's keys, or a score set's
    (``scores``: a list of such configs, and the ``model`` they share)."""
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {' '.join(str(error).split())}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a folder; a config is a YAML file.") from None
    except FileNotFoundError:
        raise ConfigError(f"The config {path} does not exist.") from None
    if not isinstance(config, dict) or ("name" not in config and "scores" not in config):
        raise ConfigError(f"{path}: a config is a YAML mapping with a `name` key (valid names: {scorer_names()}), "
                          "or a score set's `scores` list.")
    return config
