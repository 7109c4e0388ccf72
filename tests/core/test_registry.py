"""One registry class for backends, scorers and engines: the same checks, messages and built-ins for
every kind, found by name or by an installed package's entry point."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from hf_adapters.backends import BACKENDS, LikelihoodBackend, TransformersBackend
from hf_adapters.core.registry import PluginError, Registry, replaced_builtins
from hf_adapters.engines import ENGINES, Engine, LocalEngine
from hf_adapters.scorers import SCORERS, PPLScorer

ROOT = Path(__file__).resolve().parents[2]

#: Each kind's registry, a built-in of it, and what the user's module below defines of it.
KINDS = {
    "backend": (BACKENDS, TransformersBackend, "OddBackend", "odd-backend"),
    "scorer": (SCORERS, PPLScorer, "OddScorer", "OddScorer"),
    "engine": (ENGINES, LocalEngine, "OddEngine", "odd-engine"),
}
#: For each kind, a kind whose class its entry point ``other-kind`` wrongly names.
OTHER_KIND = {"backend": "scorer", "scorer": "engine", "engine": "backend"}

#: A user's module: one class of each kind.
USER_MODULE = '''
from hf_adapters.backends import LikelihoodBackend
from hf_adapters.engines import Engine
from hf_adapters.scorers import RowScorer


class OddBackend(LikelihoodBackend):
    name = "odd-backend"

    def score(self, items, **settings):
        return []


class OddScorer(RowScorer):
    name = "OddScorer"


class OddEngine(Engine):
    name = "odd-engine"

    def run(self, job):
        return None

    def interrupted_message(self, job):
        return ""
'''


def entry_points_declared() -> str:
    """``entry_points.txt``: in each kind's group, its class under its name, under another name
    (``misnamed``), and a class of another kind (``other-kind``)."""
    sections = []
    for kind, (registry, _, class_name, name) in KINDS.items():
        other = KINDS[OTHER_KIND[kind]][2]
        sections.append(f"[{registry.group}]\n{name} = odd_plugins:{class_name}\nmisnamed = odd_plugins:{class_name}\n"
                        f"other-kind = odd_plugins:{other}\n")
    return "\n".join(sections)


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The user's module installed with its entry points (a ``.dist-info`` folder on ``sys.path``); the
    registries as they were, and the module forgotten, after the test."""
    (tmp_path / "odd_plugins.py").write_text(USER_MODULE, encoding="utf-8")
    info = tmp_path / "odd_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: odd-plugins\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(entry_points_declared(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = [dict(registry) for registry, *_ in KINDS.values()]
    yield
    for (registry, *_), before in zip(KINDS.values(), saved, strict=True):
        registry.clear()
        registry.update(before)
    sys.modules.pop("odd_plugins", None)


@pytest.fixture
def kept():
    """The registries as they were after the test."""
    saved = [dict(registry) for registry, *_ in KINDS.values()]
    yield
    for (registry, *_), before in zip(KINDS.values(), saved, strict=True):
        registry.clear()
        registry.update(before)


def test_backends_scorers_and_engines_are_registries_of_one_class():
    for kind, (registry, builtin, *_) in KINDS.items():
        assert isinstance(registry, Registry) and registry.kind == kind
        assert registry.builtins[builtin.name] is builtin and registry[builtin.name] is builtin


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_point_is_imported_only_when_its_name_is_looked_up_and_then_registered(installed, kind):
    registry, _, class_name, name = KINDS[kind]
    assert name in registry.names() and name not in registry and "odd_plugins" not in sys.modules
    cls = registry.lookup(name)
    assert cls.__name__ == class_name and registry[name] is cls


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_point_whose_name_is_not_its_classs_name_is_refused_the_same_way_for_every_kind(installed, kind):
    """Only engines checked that an entry point's name is its class's ``name``: a backend or scorer
    found as ``misnamed`` was registered under a name its own class does not answer to."""
    registry, _, class_name, name = KINDS[kind]
    said = (f"the entry point misnamed = odd_plugins:{class_name} (group {registry.group}) names {class_name}, whose "
            f"`name` is '{name}': an entry point must have its class's name.")
    with pytest.raises(PluginError, match=f"^{re.escape(said)}$"):
        registry.lookup("misnamed")
    assert "misnamed" not in registry


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_point_naming_a_class_of_another_kind_is_refused_the_same_way_for_every_kind(installed, kind):
    registry, other = KINDS[kind][0], KINDS[OTHER_KIND[kind]][2]
    said = (f"the entry point other-kind = odd_plugins:{other} (group {registry.group}) names "
            f"<class 'odd_plugins.{other}'>, not a {registry.base.__name__} subclass.")
    with pytest.raises(PluginError, match=f"^{re.escape(said)}$"):
        registry.lookup("other-kind")


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_name_lists_the_known_ones_and_the_guide_to_adding_one_for_every_kind(kind):
    registry, builtin, *_ = KINDS[kind]
    with pytest.raises(ValueError, match=rf"^Unknown {kind} 'nope'; valid {kind}s: \[.*'{builtin.name}'.*\]\. Name "
                                         rf"one of these, or add one as docs/guides/\w+\.md shows\.$"):
        registry.lookup("nope")
    assert (ROOT / registry.guide).is_file()


@pytest.mark.parametrize("kind", KINDS)
def test_a_built_in_name_cannot_be_taken_by_another_class_of_any_kind(kind, kept):
    registry, builtin, *_ = KINDS[kind]
    impostor = type("Impostor", (builtin,), {})  # a subclass keeps its parent's name
    with pytest.raises(ValueError, match=rf"Impostor cannot be registered as the {kind} '{builtin.name}': that is the "
                                         rf"built-in {builtin.__name__}'s name, .* Give the class a `name` of its own, "
                                         rf"and name that {registry.where_named}\.$"):
        registry.register(impostor)
    assert registry[builtin.name] is builtin
    assert registry.register(builtin) is builtin  # the built-in itself may be registered again


@pytest.mark.parametrize("kind", KINDS)
def test_a_built_in_replaced_by_assignment_is_found_for_every_kind(kind, kept):
    registry, builtin, *_ = KINDS[kind]
    registry[builtin.name] = type("Impostor", (builtin,), {})
    assert [(found.kind, name) for found, name in replaced_builtins()] == [(kind, builtin.name)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_class_without_a_name_is_refused_for_every_kind(kind, kept):
    """A scorer without a name failed with an AttributeError; one with an empty name was registered as ''."""
    registry, builtin, *_ = KINDS[kind]
    with pytest.raises(ValueError, match=r"^Nameless needs a `name` to be registered\.$"):
        registry.register(type("Nameless", (builtin,), {"name": ""}))
    assert "" not in registry


@pytest.mark.parametrize("kind", KINDS)
def test_a_class_of_another_kind_cannot_be_registered(kind, kept):
    registry, other = KINDS[kind][0], KINDS[OTHER_KIND[kind]][1]
    with pytest.raises(ValueError, match=rf"cannot be registered among the {kind}s: it is not a "
                                         rf"{registry.base.__name__} subclass\."):
        registry.register(other)
    assert other.name not in registry


@pytest.mark.parametrize(("registry", "base", "missing"), [(BACKENDS, LikelihoodBackend, "score"),
                                                           (ENGINES, Engine, "interrupted_message and run")],
                         ids=["backend", "engine"])
def test_a_class_leaving_its_kinds_abstract_methods_undefined_is_refused(registry, base, missing, kept):
    """A backend without ``score`` was registered, and failed only when a config named it."""
    with pytest.raises(ValueError, match=rf"\.Hollow cannot be registered as the {registry.kind} 'hollow': it does not "
                                         rf"define {missing}, which every {base.__name__} subclass must define; see "
                                         rf"{registry.guide}\.$"):
        registry.register(type("Hollow", (base,), {"name": "hollow"}))
    assert "hollow" not in registry


def test_an_engines_earlier_name_finds_it_and_cannot_be_taken(kept):
    assert ENGINES.lookup("accelerate") is LocalEngine
    with pytest.raises(ValueError, match=r"cannot be registered as the engine 'accelerate': that is the built-in "
                                         r"LocalEngine's name"):
        ENGINES.register(type("Accelerate", (LocalEngine,), {"name": "accelerate"}))


def code_strings(path: Path) -> list[str]:
    """The string constants of a module's code, its docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_core_module_names_a_higher_layers_module_even_in_a_string():
    """``core/plugins.py`` found the registries by the names of the modules holding them. (The entry point
    groups it defines are named like the packages whose classes they declare, and are no module's name.)"""
    from hf_adapters.core.plugins import BACKEND_GROUP, ENGINE_GROUP, SCORER_GROUP

    higher = re.compile(r"hf_adapters\.(?!core\b)\w+")
    groups = {BACKEND_GROUP, ENGINE_GROUP, SCORER_GROUP}
    named = {path.name: found for path in sorted((ROOT / "hf_adapters" / "core").glob("*.py"))
             if (found := [text for text in code_strings(path) if higher.search(text) and text not in groups])}
    assert named == {}
