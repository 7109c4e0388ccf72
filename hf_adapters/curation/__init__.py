"""What a curator does with scores: rank and select rows (:mod:`~hf_adapters.curation.ranking`,
:mod:`~hf_adapters.curation.selection`, the papers' rules), keep a diverse subset
(:mod:`~hf_adapters.curation.diversity`), and summarise, compare and plot score files."""
