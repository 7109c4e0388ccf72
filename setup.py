"""The package list, which setup.cfg cannot write: the package's own and hf_adapters.metrics (setup.cfg maps it to
metrics/, the evaluate modules beside the package)."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["hf_adapters", "hf_adapters.*"]), "hf_adapters.metrics"])
