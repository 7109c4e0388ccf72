"""One scorer per metric, named by the seed YAML configs (``name: PPLScorer`` ...), and their registry."""

from hf_adapters.scorers.base import (
    BUILTIN_SCORERS,
    SCORERS,
    ConfigError,
    ModelRowScorer,
    RowScorer,
    build_scorer,
    load_config,
    register_scorer,
)
from hf_adapters.scorers.conversation_scorers import ConversationIFDScorer, ConversationPerplexityScorer
from hf_adapters.scorers.entropy_scorers import AnswerEntropyScorer, HESScorer, NormLossScorer, UPDScorer
from hf_adapters.scorers.excess_loss_scorer import ConversationExcessLossScorer, ExcessLossScorer, TextExcessLossScorer
from hf_adapters.scorers.ifd_scorer import IFDScorer
from hf_adapters.scorers.ifeval_scorer import IFEvalScorer
from hf_adapters.scorers.judgment_scorers import (
    AskLlmScorer,
    AtheneScorer,
    DeitaCScorer,
    DeitaQScorer,
    InfOrmScorer,
    RewardModelScorer,
    SelectitTokenScorer,
    SkyworkRewardScorer,
)
from hf_adapters.scorers.parity_scorer import InformationParityScorer
from hf_adapters.scorers.perplexity_scorers import PerplexityScorer, PPLScorer
from hf_adapters.scorers.score_set import ScoreSet

SCORERS.reserve_builtins()

__all__ = [
    "BUILTIN_SCORERS",
    "SCORERS",
    "AnswerEntropyScorer",
    "AskLlmScorer",
    "AtheneScorer",
    "ConfigError",
    "ConversationIFDScorer",
    "ConversationExcessLossScorer",
    "ConversationPerplexityScorer",
    "DeitaCScorer",
    "DeitaQScorer",
    "ExcessLossScorer",
    "HESScorer",
    "IFDScorer",
    "IFEvalScorer",
    "InfOrmScorer",
    "InformationParityScorer",
    "ModelRowScorer",
    "NormLossScorer",
    "PPLScorer",
    "PerplexityScorer",
    "RewardModelScorer",
    "RowScorer",
    "ScoreSet",
    "SelectitTokenScorer",
    "SkyworkRewardScorer",
    "TextExcessLossScorer",
    "UPDScorer",
    "build_scorer",
    "load_config",
    "register_scorer",
]
