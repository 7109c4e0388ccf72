"""Collection settings for the whole checkout: the doctests leave out an optional integration's module
where its tool is not installed (NeMo Curator's runs in .venv-nemo: ``make nemo``)."""

import importlib.util

#: Each optional integration's module, and the package it imports.
OPTIONAL_MODULES = {
    "hf_adapters/integrations/datatrove_steps.py": "datatrove",
    "hf_adapters/integrations/nemo_curator_stage.py": "nemo_curator",
}

collect_ignore = [path for path, package in OPTIONAL_MODULES.items() if importlib.util.find_spec(package) is None]
