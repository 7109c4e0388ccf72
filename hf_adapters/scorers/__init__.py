"""One scorer per metric, named by the seed YAML configs (``name: PPLScorer`` ...), and their registry."""

from .base import (
    BUILTIN_SCORERS,
    SCORERS,
    ConfigError,
    ModelRowScorer,
    RowScorer,
    build_scorer,
    load_config,
    register_scorer,
)
from .conversation_scorers import ConversationIFDScorer, ConversationPerplexityScorer
from .entropy_scorers import HESScorer, NormLossScorer, UPDScorer
from .excess_loss_scorer import ConversationExcessLossScorer, ExcessLossScorer, TextExcessLossScorer
from .ifd_scorer import IFDScorer
from .ifeval_scorer import IFEvalScorer
from .parity_scorer import InformationParityScorer
from .perplexity_scorers import PerplexityScorer, PPLScorer

BUILTIN_SCORERS.update(SCORERS)

__all__ = [
    "SCORERS",
    "ConfigError",
    "ConversationIFDScorer",
    "ConversationExcessLossScorer",
    "ConversationPerplexityScorer",
    "ExcessLossScorer",
    "HESScorer",
    "IFDScorer",
    "IFEvalScorer",
    "InformationParityScorer",
    "ModelRowScorer",
    "NormLossScorer",
    "PPLScorer",
    "PerplexityScorer",
    "RowScorer",
    "TextExcessLossScorer",
    "UPDScorer",
    "build_scorer",
    "load_config",
    "register_scorer",
]
