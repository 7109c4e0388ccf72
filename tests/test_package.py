"""The package's public names, and the command line kept to its own package."""

import ast
import re
from pathlib import Path

import pytest

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
    files = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "benchmarks").rglob("*.py")]
    importers = [path.relative_to(PACKAGE.parent).as_posix() for path in files
                 if "cli" not in path.relative_to(PACKAGE.parent).parts
                 and any(name.startswith("hf_adapters.cli") for name in imported_modules(path))]
    assert importers == ["hf_adapters/__main__.py"]



#: The package's layers, bottom up: a module imports only from its own layer or a lower one.
LAYERS = (
    ("core",),
    ("backends",),
    ("files",),
    ("formulas", "ifeval"),
    ("scorers", "curation", "integrations"),
    ("columns",),
    ("engines",),
    ("cli",),
)


def package_modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__``)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def module_imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """The package's modules each module imports, at its top or inside a function alike (an imported
    name that is itself a module counts as that module)."""
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
                targets |= submodules or {node.module}
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        graph[name] = {known for target in targets if (known := _known(target, modules)) not in (None, name)}
    return graph


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name``, or the innermost package module that holds it; None outside the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name if name and name != "hf_adapters" else None


def layer_of(module: str) -> int | None:
    part = module.split(".")[1] if module.count(".") else None
    return next((level for level, names in enumerate(LAYERS) if part in names), None)


def test_no_module_imports_from_a_higher_layer():
    graph = module_imports(package_modules())
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                    if None not in (layer_of(source), layer_of(target)) and layer_of(target) > layer_of(source))
    assert upward == []


def test_every_layer_folder_is_in_the_layer_order():
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert folders == {name for layer in LAYERS for name in layer}


def test_the_test_folders_mirror_the_layer_folders():
    """Each package layer's tests sit in ``tests/<layer>/``; ``tests/spaces/`` holds the Space's (``spaces_demo/``)."""
    tests = Path(__file__).resolve().parent
    folders = {path.name for path in tests.iterdir() if path.is_dir() and any(path.glob("test_*.py"))}
    assert folders == {name for layer in LAYERS for name in layer} | {"spaces"}
    assert sorted(path.name for path in tests.glob("test_*.py")) == ["test_benchmarks.py", "test_package.py",
                                                                      "test_readme.py"]


def test_no_import_circle_even_through_function_level_imports():
    graph = module_imports(package_modules())
    state: dict[str, str] = {}
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def engine_of(module: str) -> str | None:
    """The engine a module of ``engines/`` belongs to (``local.py`` and ``local_*.py`` the local engine's,
    ``ray.py`` and ``ray_*.py`` the Ray engine's); None for what every engine shares."""
    name = module.rpartition(".")[2]
    return next((engine for engine in ("local", "ray") if name == engine or name.startswith(f"{engine}_")), None)


def test_no_engine_imports_another_engine_and_what_they_share_imports_none():
    """What both engines need (scoring a chunk, the work folder, the conflict error) lives below them; only
    the registry (``engines/__init__.py``) imports the engines themselves."""
    graph = module_imports(package_modules())
    engines = "hf_adapters.engines."
    crossing = sorted(f"{source} -> {target}" for source, targets in graph.items() if source.startswith(engines)
                      for target in targets
                      if target.startswith(engines) and engine_of(target) not in (None, engine_of(source)))
    assert crossing == []


def test_the_default_engine_and_the_entry_point_groups_are_each_written_once():
    """One constant each, in the core (``--help`` names the groups without importing torch)."""
    from hf_adapters.core.plugins import BACKEND_GROUP, ENGINE_GROUP, SCORER_GROUP

    groups = {BACKEND_GROUP, ENGINE_GROUP, SCORER_GROUP}
    defined, written = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "DEFAULT_ENGINE"
                                                    for target in node.targets):
                defined.append(where)
            if isinstance(node, ast.Constant) and node.value in groups:
                written.append(f"{where}: {node.value}")
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and \
                    any(isinstance(arg, ast.Constant) and arg.value == "local" for arg in node.args[1:]):
                defined.append(f"{where} (a literal default)")
    assert defined == ["core/options.py"]
    assert sorted(written) == sorted(f"core/plugins.py: {group}" for group in groups)


def test_the_top_level_holds_packages_and_a_handful_of_modules():
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py", "_moved.py"]


def test_every_earlier_module_path_imports_as_the_module_it_became():
    import importlib
    import sys
    import warnings

    from hf_adapters._moved import MOVED_MODULES

    for old, new in MOVED_MODULES.items():
        first_import = f"hf_adapters.{old}" not in sys.modules
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(f"hf_adapters.{old}")
        if old == "columns":  # today a package, which hands on the module's helpers
            assert module.add_score_columns is importlib.import_module(f"hf_adapters.{new}").add_score_columns
            continue
        assert module is importlib.import_module(f"hf_adapters.{new}"), old
        assert not first_import or any(f"hf_adapters.{new}" in str(warning.message) for warning in caught), old


#: The names ``hf_adapters.jobs`` and ``hf_adapters.ray_jobs`` offered before the work folder (at 726f673): those
#: its module defined or imported from the package.
EARLIER_NAMES = {
    "jobs": """ACCELERATOR_SAVE_EVERY CHOICES COMPLETE CPU_SAVE_EVERY DEFAULT_BATCH_SIZE Engine JobConflictError
        JobSummary LOCK LocalEngine LockHeld MANIFEST OutputFormat POLL_SECONDS SCORE STREAM_ROWS ScoringJob
        WRITTEN_FORMAT append_durably check_dataset check_output_path column_names count_valid default_save_every
        exclusive_lock finished_in_other_layout finished_job format_record interrupted_line is_stream iter_rows
        job_changes job_manifest logger manifest_columns output_schema positive_int read_json record_finished_job
        records rows_of rows_without_manifest run_scoring_job same_job saved_rows score_chunk score_dataset
        score_schema scored_record shard_range truncate_file whole_json_lines work_dir_for write_atomically
        write_output written_in""",
    "ray_jobs": """BACKEND_LOG_LEVEL BLOCKS_PER_WORKER DEFAULT_ROWS_PER_BLOCK ENGINE Engine EngineError FILE_PER_BLOCK
        JobConflictError JobSummary LOCK LockHeld OutputFormat PARTS RayEngine RayJobError ScoringJob block_name
        check_dataset count_valid default_rows_per_block default_save_every discard_if_nothing_saved exclusive_lock
        finish finished_in_other_layout finished_job finished_parts interrupted_line job_manifest logger merge_parts
        non_negative_float open_work_dir output_schema part_layout positive_int remove_temporary_files
        run_ray_scoring_job saved_rows score_schema work_dir_for worker_error""",
}


@pytest.mark.parametrize("old", sorted(EARLIER_NAMES))
def test_every_name_an_earlier_engine_module_offered_resolves_under_its_old_path(old):
    import importlib
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(f"hf_adapters.{old}")
        missing = [name for name in EARLIER_NAMES[old].split() if not hasattr(module, name)]
        assert missing == []
        with pytest.warns(DeprecationWarning, match="hf_adapters.engines.work_folder.work_dir_for"):
            assert module.work_dir_for("scores/ppl.jsonl").as_posix() == "scores/ppl.jsonl.parts"
        assert module.interrupted_line(3, 10, Path("out.parts")).startswith("Interrupted: 3 of 10 rows are saved")
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_setup_cfg_lists_every_package_folder_and_the_metric_modules():
    import configparser

    from setuptools import find_packages

    config = configparser.ConfigParser()
    config.read(PACKAGE.parent / "setup.cfg", encoding="utf-8")
    listed = config["options"]["packages"].split()
    assert sorted(listed) == sorted([*find_packages(str(PACKAGE.parent), include=["hf_adapters", "hf_adapters.*"]),
                                     "hf_adapters.metrics"])


def test_the_architecture_pages_formulas_line_names_every_formula_module_and_no_other():
    """The score guide sends a new formula's file to this line of docs/architecture.md's layer map."""
    lines = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("formulas/"))
    end = next(index for index in range(start + 1, len(lines)) if not lines[index].startswith(" "))
    named = set(re.findall(r"(\w+)\.py", " ".join(lines[start:end])))
    assert named == {path.stem for path in (PACKAGE / "formulas").glob("*.py")} - {"__init__"}
