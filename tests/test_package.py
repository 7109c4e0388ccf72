"""The package's public names, and the command line kept to its own package."""

import ast
from pathlib import Path

import hf_adapters

PACKAGE = Path(hf_adapters.__file__).parent


def test_public_names_import_from_the_package():
    from hf_adapters import (  # noqa: F401
        add_ifd_column,
        add_information_parity_column,
        add_perplexity_column,
        compute_ifd,
        compute_information_parity,
        compute_perplexity,
        evaluate_parallel,
        score_continuations,
    )

    for name in hf_adapters.__all__:
        assert callable(getattr(hf_adapters, name)) or isinstance(getattr(hf_adapters, name), str), name


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules (and imported names) a file of the repository imports."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_only_the_entry_point_imports_the_command_line_package():
    files = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "benchmarks").glob("*.py")]
    importers = [path.relative_to(PACKAGE.parent).as_posix() for path in files
                 if "cli" not in path.relative_to(PACKAGE.parent).parts
                 and any(name.startswith("hf_adapters.cli") for name in imported_modules(path))]
    assert importers == ["hf_adapters/__main__.py"]

