"""The likelihood core and greedy generation on a GPU (``python -m benchmarks.gpu.run``): one module per
section of its report, on the models and rows of ``random_model`` and ``llama_shapes``."""
