"""Engines that run a scoring job over a whole data set: :mod:`~hf_adapters.engines.local` (this process,
or each process of ``accelerate launch``; resumable) and :mod:`~hf_adapters.engines.ray` (a pool of Ray
actors)."""
