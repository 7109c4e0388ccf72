"""The benchmark suite, one subpackage per question (see README.md): ``python -m benchmarks.speed.run``
(``make bench``) and the others, run from the repository root."""
