"""``ScoreSet``: several scorers over the same rows, with one model, in shared forward passes.

Each member builds its items exactly as it does alone (its convention, template, start token and
truncation), so each member's columns equal that scorer run alone, within the float32 bound (the
passes are batched differently); a ``convention: exact`` member that gives no ``template`` nor
``template_no_input`` reads the answer after IFD's prompt, as its name says: it takes the set's IFD's
(:class:`IFDPrompt`). What the members share is the work: for every batch of rows, the
distinct token sequences of all members go through the model once
(:mod:`hf_adapters.backends.shared_passes`). IFD, ``PPLScorer`` and the ``convention: exact`` UPD, HES,
NormLoss and answer entropy read three distinct sequences per row, where they cost seven passes one
after another.

Example config (``hf-adapters score set.yaml --data rows.jsonl --output scores.jsonl``)::

    model: HuggingFaceTB/SmolLM2-135M-Instruct
    batch_size: 16
    scores:
      - name: IFDScorer
      - name: PPLScorer
      - name: UPDScorer
        convention: exact
      - name: HESScorer
        convention: exact
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.backends.shared_passes import SharedPasses
from hf_adapters.formulas.entropy_scores import PeerScoreOptions
from hf_adapters.scorers.base import (
    ConfigError,
    ModelRowScorer,
    RowScorer,
    build_scorer,
    register_scorer,
    scorer_class,
)
from hf_adapters.scorers.ifd_scorer import IFDScorer

#: The keys a set gives every member that runs a model: given once, beside ``scores``.
SHARED_KEYS = ("model", "batch_size", "max_batch_tokens", "dtype", "backend")
#: The shared key a member may give too: a model of its own, loaded once for every member that names it.
MODEL_KEY = "model"
#: The keys of IFD's prompt, after which the members of ``convention: exact`` read the answer.
PROMPT_KEYS = ("template", "template_no_input")


@dataclass(frozen=True)
class IFDPrompt:
    """The prompt of a set's IFD member (its templates, resolved), which the members that read the answer
    after IFD's prompt take when they give none of their own."""

    template: str
    template_no_input: str

    def taken_by(self, member: RowScorer, config: Mapping[str, Any]) -> dict[str, str]:
        """The prompt keys ``member`` (built from ``config``) takes from IFD: none where it reads no answer
        after IFD's prompt (not ``convention: exact``) or gives ``template`` or ``template_no_input`` itself;
        else each whose value differs from the member's default (so that a set on the default prompt keeps
        its members' configs)."""
        spec = getattr(member, "spec", None)
        if not isinstance(spec, PeerScoreOptions) or spec.convention != "exact" or set(PROMPT_KEYS) & set(config):
            return {}
        own = {"template": spec.prompt.prompt_template, "template_no_input": spec.prompt.prompt_template_no_input}
        return {key: getattr(self, key) for key in PROMPT_KEYS if getattr(self, key) != own[key]}


def unknown_member_keys(name: str, position: int, unknown: Sequence[str], keys: Sequence[str],
                        further: Sequence[str]) -> str:
    """The message for keys a set's member (``name`` at ``position``) may not give: the keys it may give
    (its scorer's ``keys`` and optional ``further``, less those the set gives every member), and where the
    set's own keys go."""
    own = [key for key in keys if key not in SHARED_KEYS]
    optional = [key for key in further if key not in SHARED_KEYS]
    shared = [key for key in SHARED_KEYS if key != MODEL_KEY]
    columns = (" `score_columns` is the job's: give it once, beside `scores`, naming any member's outputs."
               if "score_columns" in unknown else "")
    return (f"Unknown key(s) {list(unknown)} for {name} (member {position} of the score set); a member may give "
            f"{own}" + (f", and the optional {optional}" if optional else "")
            + f"; {', '.join(f'`{key}`' for key in shared[:-1])} and `{shared[-1]}` are the set's, given once "
            f"beside `scores`, as `{MODEL_KEY}` is unless a member reads a model of its own.{columns}")


def ifds_prompt(members: Sequence[RowScorer]) -> IFDPrompt | None:
    """The prompt of the set's IFD member (of instruction rows); None where it has none."""
    ifd = next((member for member in members if isinstance(member, IFDScorer)), None)
    return None if ifd is None else IFDPrompt(ifd.spec.prompt_template, ifd.spec.prompt_template_no_input)


@register_scorer
class ScoreSet(RowScorer):
    """Several scorers' outputs from one model, in shared passes (see the module's docstring).

    Args:
        scores: the members: scorer configs (``{"name": "IFDScorer", ...}``) or bare scorer names. No two
            may have an output of the same name.
        model, batch_size, max_batch_tokens, dtype, backend: as a scorer's, for every member that runs a model; with
            ``tokenizer``, a loaded model (as in transformers' ``pipeline``).
        device, progress: as a scorer's.

    A job writes each member's first output under its own name (``ifd``, ``perplexity``...), and with
    ``score_columns`` the others; ``outputs`` lists every member's, in member order.

    Example:
        >>> from hf_adapters.scorers import ScoreSet
        >>> batch = {"instruction": ["Name a colour."], "input": [""], "output": ["Blue."]}
        >>> scores = ScoreSet(["IFDScorer", "PPLScorer"]).score_batch(batch)
        >>> sorted(scores)
        ['ifd', 'perplexity', 'ppl_conditional', 'ppl_direct']
    """

    name = "ScoreSet"
    runs_model = True

    def __init__(self, scores: Sequence[Mapping[str, Any] | str] | None = None, *, tokenizer: Any = None,
                 device: str | torch.device | None = None, progress: bool | None = False, **shared: Any):
        if unknown := sorted(set(shared) - set(SHARED_KEYS)):
            raise ConfigError(f"Unknown key(s) {unknown} for a score set; it takes `scores` and the keys its members "
                              f"share, {list(SHARED_KEYS)}; give every other key in its member's config.")
        if not isinstance(scores, (list, tuple)) or not scores:
            raise ConfigError("A score set's `scores` must be a list of scorer configs (each with its `name`), "
                              f"got {scores!r}.")
        configs = [self._member_entry(entry, position) for position, entry in enumerate(scores)]
        members = [self._built(config, position, shared, tokenizer, device, progress)
                   for position, config in enumerate(configs)]
        if prompt := ifds_prompt(members):
            members = [self._member({**config, **taken}, shared, tokenizer, device, progress)
                       if (taken := prompt.taken_by(member, config)) else member
                       for config, member in zip(configs, members, strict=True)]
        self.members = members
        self.outputs = tuple(output for member in self.members for output in member.outputs)
        owners: dict[str, str] = {}
        for member in self.members:
            for output in member.outputs:
                if output in owners:
                    raise ConfigError(f"Two members of the score set write the column {output!r}: {owners[output]} "
                                      f"and {member.name}. Score them in separate jobs, or give one of them options "
                                      "that leave that output out.")
                owners[output] = member.name
        self.named_outputs = tuple(member.outputs[0] for member in self.members)
        self.output_types = {key: value for member in self.members for key, value in member.output_types.items()}
        self.progress = progress
        #: The members that read a model of their own (``model`` in their config), not the set's.
        self._own_model = [MODEL_KEY in config for config in configs]
        modelled = [member for member in self.members if member.runs_model]
        on_the_sets = [member for member, own in zip(self.members, self._own_model, strict=True)
                       if member.runs_model and not own]
        first = (on_the_sets or modelled)[0].config if modelled else {}
        self.config = {**{key: first[key] for key in SHARED_KEYS if key in first},
                       "scores": [self._member_config(member, own)
                                  for member, own in zip(self.members, self._own_model, strict=True)]}
        self.columns, self.roles = {}, {}
        self._backends: dict[str, LikelihoodBackend] = {}
        #: The work so far: ``items``, what the members asked the model to score (what they would run
        #: alone), and ``forward_passes``, the sequences that went through it.
        self.work = {"items": 0, "forward_passes": 0}

    @staticmethod
    def _member_entry(entry: Mapping[str, Any] | str, position: int) -> Mapping[str, Any]:
        """The config of the member at ``position`` (a bare name: a config with nothing else), checked to be a
        scorer's config that leaves the shared keys to the set."""
        config = {"name": entry} if isinstance(entry, str) else entry
        if not isinstance(config, Mapping) or not isinstance(config.get("name"), str):
            raise ConfigError(f"Member {position} of the score set must be a scorer config with a `name`, "
                              f"got {entry!r}.")
        if "scores" in config or config["name"] == ScoreSet.name:
            raise ConfigError(f"Member {position} of the score set is a score set; list its members instead.")
        if not scorer_class(config).joins_score_sets:
            raise ConfigError(f"{config['name']} (member {position} of the score set) reads a model of its own, not "
                              "the set's causal LM: score it in a job of its own.")
        if given := [key for key in SHARED_KEYS if key in config and key != MODEL_KEY]:
            raise ConfigError(f"{config['name']} (member {position} of the score set) gives {given}: the members share "
                              "these; give them once, beside `scores` (a member may give a `model` of its own).")
        return config

    @staticmethod
    def _member(config: Mapping[str, Any], shared: Mapping[str, Any], tokenizer: Any, device: Any,
                progress: bool | None) -> RowScorer:
        if not scorer_class(config).runs_model:
            return build_scorer(config)
        own = {MODEL_KEY: config[MODEL_KEY]} if MODEL_KEY in config else {}
        return build_scorer({**config, **shared, **own}, tokenizer=None if own else tokenizer, device=device,
                            progress=progress)

    @staticmethod
    def _built(config: Mapping[str, Any], position: int, shared: Mapping[str, Any], tokenizer: Any, device: Any,
               progress: bool | None) -> RowScorer:
        """The member ``config`` configures (:meth:`_member`); a key its scorer refuses is named with the keys
        a member may give, and the set's own keys said to belong beside ``scores``."""
        try:
            return ScoreSet._member(config, shared, tokenizer, device, progress)
        except ConfigError:
            keys, further = scorer_class(config).config_keys()
            if unknown := sorted(set(config) - {*keys, *further}):
                raise ConfigError(unknown_member_keys(config["name"], position, unknown, keys, further)) from None
            raise

    @staticmethod
    def _member_config(member: RowScorer, own_model: bool) -> dict[str, Any]:
        """The member's config in the set's: its own keys, and its ``model`` where it reads its own."""
        return {key: value for key, value in member.fingerprint().items()
                if key not in SHARED_KEYS or (own_model and key == MODEL_KEY)}

    @classmethod
    def from_options(cls, scores: Sequence[Mapping[str, Any] | str], **options: Any) -> ScoreSet:
        """The set of ``scores`` with an entry point's keyword options: ``model_id`` (or ``model`` and
        ``tokenizer``), ``backend``, ``dtype``, ``device``, ``batch_size``, ``progress``."""
        if "model_id" in options:
            options["model"] = options.pop("model_id")
        return cls(scores, **options)

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, **self.config}

    @property
    def source_columns(self) -> list[str]:
        return list(dict.fromkeys(column for member in self.members for column in member.source_columns))

    @property
    def required_fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(field for member in self.members for field in member.required_fields))

    @property
    def text_fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(field for member in self.members for field in member.text_fields))

    def output_features(self) -> dict[str, Any]:
        return {name: feature for member in self.members for name, feature in member.output_features().items()}

    def use_columns(self, column_names: Sequence[str]) -> None:
        for member in self.members:
            member.use_columns(column_names)

    def check_rows(self, rows: Sequence[Mapping[str, Any]], offset: int = 0) -> None:
        for member in self.members:
            member.check_rows(rows, offset)

    def load(self) -> LikelihoodBackend | None:
        """The model every member scores with, loaded once and handed to each of them (None: no member runs one)."""
        modelled = [member for member in self.members if isinstance(member, ModelRowScorer)]
        if not self._backends:
            for member in modelled:
                if (backend := self._backends.get(member.config[MODEL_KEY])) is None:
                    self._backends[member.config[MODEL_KEY]] = member.load()
                else:
                    member._backend = backend
        return next(iter(self._backends.values()), None)

    def prepare(self) -> None:
        self.load()
        for member in self.members:
            member.prepare()

    def model_identity(self) -> dict[str, Any] | None:
        """Each member's model identity (a reference model's included); None when one cannot be said."""
        identities = [member.model_identity() for member in self.members if member.runs_model]
        return None if any(identity is None for identity in identities) else {"members": identities}

    def measured_choices(self) -> dict[str, Any]:
        """The choices of the set's model, or with members of their own models, each model's by its name."""
        self.load()
        if len(self._backends) <= 1:
            return next((backend.measured_choices() for backend in self._backends.values()), {})
        return {"models": {model: backend.measured_choices() for model, backend in self._backends.items()}}

    def reuse_measured_choices(self, choices: Mapping[str, Any]) -> None:
        self.load()
        if len(self._backends) <= 1:
            for backend in self._backends.values():
                backend.reuse_measured_choices(choices)
            return
        for model, backend in self._backends.items():
            backend.reuse_measured_choices(choices.get("models", {}).get(model, {}))

    def score_batch(self, batch: Mapping[str, list], first_row: int = 0) -> dict[str, list]:
        """Every member's outputs for a batch of columns, their likelihood calls sent through shared passes."""
        self.load()
        shared = SharedPasses(batch_size=self._batch_size(), progress=self.progress)
        with shared.recording():
            for member in self.members:
                if member.runs_model:
                    member.score_batch(batch, first_row)
        shared.run()
        self.work["items"] += shared.sequences
        self.work["forward_passes"] += shared.forward_passes
        results: dict[str, list] = {}
        with shared.replaying():
            for member in self.members:
                results.update(member.score_batch(batch, first_row))
        return results

    def _batch_size(self) -> int | None:
        return self.config.get("batch_size")
