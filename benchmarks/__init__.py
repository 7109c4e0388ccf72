"""The benchmark suite: ``python benchmarks/run.py`` (``make bench``) and its pieces."""
