"""How the transformers backend bounds its batches: the default token budgets and padding limit,
shared by scoring (:mod:`~hf_adapters.backends.transformers.model`) and embedding
(:mod:`~hf_adapters.backends.transformers.embedding`)."""

#: Default token budget of one batch (rows x padded length) on accelerators, and on the CPU.
DEFAULT_MAX_BATCH_TOKENS = 16384
CPU_MAX_BATCH_TOKENS = 2048
#: On the CPU an item joins a batch only if padding adds at most this fraction of the batch's length:
#: one unpadded sequence of a few hundred tokens already keeps the cores busy, and padding is wasted work.
CPU_MAX_PADDING = 0.1
