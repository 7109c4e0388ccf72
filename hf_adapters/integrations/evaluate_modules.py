"""The glue of every evaluate module in ``metrics/``: :class:`ScorerMetric`, one base that checks the rows,
stores them in evaluate's cache and hands them to a scorer, so that a module holds only its card text,
its columns and the scorer(s) it runs.

A module published as a Space copies the ``hf_adapters`` folder beside it, so this base travels with it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import datasets
import evaluate

from hf_adapters.core.conversations import check_conversation_list
from hf_adapters.core.texts import check_texts
from hf_adapters.scorers.base import ModelRowScorer


def filled(values: Sequence | None, rows: int) -> Sequence:
    """An optional column's values with "" for an omitted column (``rows`` of them) or a None row; a
    single string as it is, for the check to name."""
    if values is None:
        return [""] * rows
    return values if isinstance(values, str) else ["" if value is None else value for value in values]


@dataclass(frozen=True)
class ModuleCard:
    """What a module's ``MetricInfo`` says beside its features: the card text (evaluate's ``_DESCRIPTION``,
    ``_CITATION`` and ``_KWARGS_DESCRIPTION``) and its links."""

    description: str
    citation: str
    inputs_description: str
    reference_urls: tuple[str, ...] = ()
    codebase_urls: tuple[str, ...] = ()


class ScorerMetric(evaluate.Metric, metaclass=abc.ABCMeta):
    """Base of the evaluate modules: ``compute``, ``add_batch`` and ``add`` over string columns, run by a scorer.

    A subclass sets class attributes only:

    - ``card``: its :class:`ModuleCard`;
    - ``columns``: each input column (a keyword of ``compute``, ``add_batch`` and ``add``, and a string
      feature) -> what the scorer calls it (its text role), or the formula's keyword;
    - ``scorer``: the :class:`~hf_adapters.scorers.ModelRowScorer` whose ``result`` the rows get; its
      ``from_options`` takes the other keywords of ``compute``, and an unknown one is an error naming
      ``NAME.compute``. A module without a model sets ``formula`` instead: a function of the columns
      (by their roles) and the keywords (``staticmethod(compute_ifeval)``);
    - ``conversation_scorer`` (optional): the scorer of ``messages`` (conversations), which ``compute``
      then takes instead of the columns and scores as they are, without evaluate's cache;
    - ``optional_columns``: columns that may be omitted, or hold None in a row (both read as "");
    - ``check_rows`` (optional): the formula's own check of the columns, as keywords
      (``staticmethod(check_pairs)``); by default each column must be a list of strings and all as long;
    - ``encoded_columns``: columns the cache holds encoded, column -> (encode, which checks the values
      and names a bad row; decode), as IFEval stores its rows of any shape as JSON strings.

    Every batch is checked before evaluate casts it, so a bad row gets an error naming it, and a
    missing column is named rather than met as a cache file error. evaluate takes the first concrete
    module class of a script, so this base is abstract.

    Example:
        >>> from hf_adapters.integrations.evaluate_modules import ModuleCard, ScorerMetric
        >>> class Lengths(ScorerMetric):
        ...     card = ModuleCard("Characters per text.", "", "predictions (list of str): the texts.")
        ...     columns = {"predictions": "texts"}
        ...     formula = staticmethod(lambda texts: {"lengths": [len(text) for text in texts]})
        >>> Lengths().compute(predictions=["abc", "de"])
        {'lengths': [3, 2]}
        >>> Lengths().compute(predictions=["abc", 4])
        Traceback (most recent call last):
        ...
        TypeError: `predictions`[1] must be a string, got int: 4
    """

    columns: ClassVar[dict[str, str]]
    scorer: ClassVar[type[ModelRowScorer] | None] = None
    formula: ClassVar[Callable[..., dict[str, Any]] | None] = None
    conversation_scorer: ClassVar[type[ModelRowScorer] | None] = None
    optional_columns: ClassVar[tuple[str, ...]] = ()
    check_rows: ClassVar[Callable[..., Any] | None] = None
    encoded_columns: ClassVar[dict[str, tuple[Callable[[Sequence], list], Callable[[Sequence], list]]]] = {}

    @property
    @abc.abstractmethod
    def card(self) -> ModuleCard:
        """The module's card text and links (a class attribute in each module)."""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if isinstance(cls.__dict__.get("card"), ModuleCard):  # the class's docstring, as evaluate's modules have
            cls.__doc__ = cls.card.description + cls.card.inputs_description + (cls.__dict__.get("__doc__") or "")

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=self.card.description,
            citation=self.card.citation,
            inputs_description=self.card.inputs_description,
            features=datasets.Features({column: datasets.Value("string") for column in self.columns}),
            reference_urls=list(self.card.reference_urls),
            codebase_urls=list(self.card.codebase_urls),
        )

    @property
    def required_columns(self) -> list[str]:
        """The columns every row needs."""
        return [column for column in self.columns if column not in self.optional_columns]

    def compute(self, **kwargs: Any) -> dict[str, Any] | None:
        """The scores of the given rows (and of those added before): the columns as keyword arguments, or
        ``messages`` where the module scores conversations; the other keywords are the scorer's options."""
        messages = kwargs.pop("messages", None) if self.conversation_scorer is not None else None
        columns = {column: kwargs.pop(column, None) for column in self.columns}
        if messages is not None:
            if any(values is not None for values in columns.values()):
                rows = " and ".join(f"`{column}`" for column in self.required_columns)
                kind = "texts" if len(self.required_columns) == 1 else "rows"
                raise ValueError(f"Pass `messages` (conversations) or {rows} ({kind}), not both.")
            return self.scorer_from(self.conversation_scorer, kwargs).result(check_conversation_list(messages))
        if all(values is None for values in columns.values()) and self.writer is None:  # None: nothing added
            check_texts(None, self.required_columns[0])
        return super().compute(**columns, **kwargs)

    def add_batch(self, **kwargs: Any) -> None:
        """Add rows, checked (an error names a bad row) and, where ``encoded_columns`` says so, encoded."""
        columns = {column: kwargs.pop(column, None) for column in self.columns}
        return super().add_batch(**self.checked_columns(columns), **kwargs)

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """Add one row: ``prediction`` and ``reference`` as in evaluate, other columns by their own names."""
        row = {"predictions": prediction, "references": reference, **kwargs}
        return self.add_batch(**{name: [value] for name, value in row.items() if value is not None})

    def checked_columns(self, columns: Mapping[str, Sequence | None]) -> dict[str, Sequence]:
        """The columns as the cache stores them: checked (``check_rows``, else each a list of strings and
        all as long), an omitted optional column or a None row of one as "", encoded columns encoded. A
        TypeError names a missing column or a row that is not a string; a ValueError, unequal lengths."""
        for column in self.required_columns:
            if columns[column] is None:
                check_texts(None, column)  # raises: the column is missing
        if self.check_rows is not None:
            self.check_rows(**columns)
        rows = len(columns[self.required_columns[0]])
        checked = {column: filled(values, rows) if column in self.optional_columns else values
                   for column, values in columns.items()}
        if self.check_rows is None:
            for column, values in checked.items():
                if column not in self.encoded_columns:
                    check_texts(values, column)
            if len(set((lengths := {column: len(values) for column, values in checked.items()}).values())) > 1:
                names = [f"`{column}`" for column in lengths]
                raise ValueError(f"{', '.join(names[:-1])} and {names[-1]} must have the same length, got {lengths}.")
        for column, (encode, _) in self.encoded_columns.items():
            checked[column] = encode(checked[column])
        return checked

    def scorer_from(self, cls: type[ModelRowScorer], options: Mapping[str, Any]) -> ModelRowScorer:
        """``cls`` built from ``compute``'s keyword ``options`` (no progress bar unless asked for); an
        unknown option is a ValueError naming ``NAME.compute``."""
        return cls.from_options({"progress": None, **options}, caller=f"{self.name}.compute")

    def _compute(self, **values: Any) -> dict[str, Any]:
        columns = {column: values.pop(column) for column in self.columns}
        for column, (_, decode) in self.encoded_columns.items():
            columns[column] = decode(columns[column])
        by_role = {self.columns[column]: column_values for column, column_values in columns.items()}
        if self.scorer is None:
            return self.formula(**by_role, **values)
        return self.scorer_from(self.scorer, values).result(by_role)
