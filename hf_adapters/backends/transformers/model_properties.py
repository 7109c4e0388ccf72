"""What the transformers backend reads off a model: the model inside a PEFT wrapper, and its position limit."""

from __future__ import annotations

from transformers import PreTrainedModel


def unwrap_model(model):
    """The transformers model inside a PEFT wrapper, or the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def model_max_length(model: PreTrainedModel) -> int | None:
    """The longest sequence the model's position embeddings allow, if it says."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
