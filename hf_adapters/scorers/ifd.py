"""``IFDScorer``: Instruction-Following Difficulty of instruction rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..ifd import (
    DEFAULT_REVERSE_TEMPLATE,
    DEFAULT_TEMPLATE,
    DEFAULT_TEMPLATE_NO_INPUT,
    check_options,
    check_templates,
    convention_settings,
    score_ifd,
)
from ..models import DEFAULT_MODEL_ID
from ..options import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH
from .base import ConfigError, ModelRowScorer, register_scorer


@register_scorer
class IFDScorer(ModelRowScorer):
    """Instruction-Following Difficulty, PPL(A|Q) / PPL(A) (``mode: loss_ratio``: the ratio of mean
    NLLs), with both perplexities, as the ``ifd`` metric computes them.

    ``convention: cherry``, ``superfiltering`` or ``opendataarena`` reproduces that peer's numbers
    (see :mod:`hf_adapters.conventions`); ``template``, ``template_no_input`` and ``mode`` then
    default to the peer's. The seed's config with ``convention: opendataarena`` gives what it gave
    in OpenDataArena-Tool.
    """

    name = "IFDScorer"
    options = {
        "model": DEFAULT_MODEL_ID,
        "max_length": DEFAULT_MAX_LENGTH,
        "batch_size": DEFAULT_BATCH_SIZE,
        "dtype": None,
        "template": DEFAULT_TEMPLATE,
        "template_no_input": DEFAULT_TEMPLATE_NO_INPUT,
    }
    extra_options = {"mode": "ppl_ratio", "direction": "forward", "reverse_template": DEFAULT_REVERSE_TEMPLATE,
                     "return_token_losses": False, "convention": "exact"}
    roles = {"instruction": "instruction", "input": "input", "output": "output"}
    optional_roles = ("input",)
    text_roles = ("instruction", "input", "output")
    outputs = ("ifd", "ppl_conditional", "ppl_direct")
    result_keys = ("ifd_scores", "conditional_perplexities", "direct_perplexities")
    token_outputs = ("tokens", "conditional_token_losses", "direct_token_losses")
    #: The keys a peer's ``convention`` gives defaults to.
    CONVENTION_KEYS = ("template", "template_no_input", "mode")

    def __new__(cls, **config: Any):
        """``IFDScorer(turns=...)`` (a config ``name: IFDScorer`` with ``turns:``) scores conversations."""
        if cls is IFDScorer and "turns" in config:
            from .conversation import ConversationIFDScorer

            return ConversationIFDScorer(**config)
        return super().__new__(cls)

    def __init__(self, **config: Any):
        # None, as in the metric's and compute_ifd's signatures, means the convention's default.
        config = {key: value for key, value in config.items() if key not in self.CONVENTION_KEYS or value is not None}
        convention = config.get("convention", "exact")
        if convention != "exact" and isinstance(convention, str):
            settings = convention_settings(convention, *(config.get(key) for key in self.CONVENTION_KEYS))
            config.update(zip(self.CONVENTION_KEYS, settings, strict=True))
        super().__init__(**config)
        for key in ("template", "template_no_input"):
            if not isinstance(self.config[key], str):
                raise ConfigError(f"{self.name}: `{key}` must be a string, got {self.config[key]!r}.")
        try:
            check_templates(self.config["template"], self.config["template_no_input"])
        except ValueError as error:
            raise ConfigError(f"{self.name}: {error}") from None
        try:
            check_options(self.config["max_length"], self.config["batch_size"], self.setting("mode"),
                          self.setting("direction"), self.setting("reverse_template"), self.setting("convention"),
                          self.setting("return_token_losses"))
        except ValueError as error:
            raise ConfigError(f"{self.name}: {error}") from None

    def result(self, texts: Mapping[str, Sequence[str]], first_row: int = 0) -> dict[str, Any]:
        model, tokenizer = self.load()
        return score_ifd(
            model, tokenizer, texts["instruction"], texts["output"], texts["input"],
            template=self.config["template"], template_no_input=self.config["template_no_input"],
            max_length=self.config["max_length"], batch_size=self.config["batch_size"], mode=self.setting("mode"),
            progress=self.progress, first_row=first_row, direction=self.setting("direction"),
            reverse_template=self.setting("reverse_template"), return_token_losses=self.setting("return_token_losses"),
            convention=self.setting("convention"),
        )
