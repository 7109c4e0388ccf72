"""Files in and out: rows read from the files people keep them in (:mod:`~hf_adapters.files.data_io`),
score files (:mod:`~hf_adapters.files.score_files`), outputs checked before any work
(:mod:`~hf_adapters.files.output_paths`) and values as JSON holds them (:mod:`~hf_adapters.files.json_values`)."""
