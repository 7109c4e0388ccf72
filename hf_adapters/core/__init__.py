"""The data model every layer above shares, with no model in it: the core's items and what a backend
returns (:mod:`~hf_adapters.core.likelihood`), options declared once (:mod:`~hf_adapters.core.options`),
texts and conversations into items (:mod:`~hf_adapters.core.texts`, :mod:`~hf_adapters.core.conversations`),
the peers' conventions as data (:mod:`~hf_adapters.core.conventions`) and the plugin loader."""
