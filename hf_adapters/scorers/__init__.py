"""One scorer per metric, named by the seed YAML configs (``name: PPLScorer`` ...), and their registry."""

from .base import SCORERS, ConfigError, ModelRowScorer, RowScorer, build_scorer, load_config, register_scorer
from .conversation import ConversationIFDScorer, ConversationPerplexityScorer
from .ifd import IFDScorer
from .ifeval import IFEvalScorer
from .parity import InformationParityScorer
from .perplexity import PerplexityScorer, PPLScorer

__all__ = [
    "SCORERS",
    "ConfigError",
    "ConversationIFDScorer",
    "ConversationPerplexityScorer",
    "IFDScorer",
    "IFEvalScorer",
    "InformationParityScorer",
    "ModelRowScorer",
    "PPLScorer",
    "PerplexityScorer",
    "RowScorer",
    "build_scorer",
    "load_config",
    "register_scorer",
]
