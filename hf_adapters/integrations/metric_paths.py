"""Where the evaluate modules of ``metrics/`` are: :func:`metric_path`, the folder to give ``evaluate.load``.

An installed package holds them in ``hf_adapters/metrics/`` (setup.cfg maps that package to ``metrics/``); a checkout
or an editable install has them beside the package folder. evaluate reads a module offline only from a local path
(``evaluate.load("hf_adapters/ifd")`` would be a Hub name), so the path is what the package offers.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]
#: Where the modules are looked for, in order: inside the installed package, then beside it in a checkout.
_METRIC_FOLDERS = (_PACKAGE / "metrics", _PACKAGE.parent / "metrics")


def metric_names() -> list[str]:
    """The evaluate modules this package ships, by name."""
    folder = next((folder for folder in _METRIC_FOLDERS if folder.is_dir()), None)
    return sorted(path.parent.name for path in folder.glob("*/*.py") if path.stem == path.parent.name) if folder else []


def metric_path(name: str) -> str:
    """The folder of the evaluate module ``name`` (``"ifd"``, ``"perplexity"``, ...), for ``evaluate.load``, from
    any working directory.

    Example:
        >>> import evaluate
        >>> from hf_adapters import metric_path
        >>> type(evaluate.load(metric_path("ifeval"))).__name__
        'IFEval'
    """
    for folder in _METRIC_FOLDERS:
        if (folder / name / f"{name}.py").is_file():
            return str(folder / name)
    raise ValueError(f"no evaluate module named {name!r}; the package ships {', '.join(metric_names()) or 'none'}")
