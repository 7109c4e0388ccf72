"""Inside other tools' pipelines: the same rows scored by ``hf-adapters score``, a datatrove pipeline and a NeMo
Curator pipeline, time and memory side by side."""
