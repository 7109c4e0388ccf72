"""The transformers backend: the batched forward pass (:mod:`~hf_adapters.backends.transformers.model`),
greedy generation, pooled hidden states, and the CPU's float32 kernels."""
