"""The benchmark suite: ``python -m benchmarks.run`` (``make bench``) and its pieces, run from the repository root."""
