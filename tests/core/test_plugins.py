"""User backends and scorers from the command line: entry points of an installed package, and plugin
modules named by ``--plugin`` or ``HF_ADAPTERS_PLUGINS``; none is imported until it is needed."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_adapters import cli
from hf_adapters.backends import BACKENDS, backend_class
from hf_adapters.engines import ENGINES
from hf_adapters.scorers import SCORERS, ConfigError
from hf_adapters.scorers.base import scorer_class
from tests.conftest import read_jsonl, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
HF_ADAPTERS = Path(sys.executable).parent / "hf-adapters"

#: A user's module: a backend for which every continuation token costs half a nat (no model runs;
#: the tokenizer is the model folder's), and a scorer counting characters.
USER_MODULE = '''
import math

from transformers import AutoTokenizer

from hf_adapters.backends import LikelihoodBackend
from hf_adapters.core.likelihood import ContinuationScore
from hf_adapters.scorers import RowScorer


class HalfNatBackend(LikelihoodBackend):
    name = "halfnat"

    def __init__(self, tokenizer, model_id):
        self.tokenizer, self.model_id = tokenizer, model_id

    @classmethod
    def from_pretrained(cls, model_id, *, dtype=None, device=None):
        return cls(AutoTokenizer.from_pretrained(model_id), model_id)

    def identity(self):
        return {"model": self.model_id, "backend": self.name}

    def score(self, items, *, token_losses=False, **settings):
        return [ContinuationScore(0.5 * len(continuation) if continuation else math.nan, len(continuation), False,
                                  (0.5,) * len(continuation) if token_losses else None)
                for _, continuation in items]


class CharCount(RowScorer):
    name = "CharCount"
    roles = {"text": "text"}
    text_roles = ("text",)

    def score_batch(self, batch, first_row=0):
        return {"score": [float(len(text)) for text in self.read_texts(batch, first_row)["text"]]}
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "halfnat-backend"
version = "0.1"

[project.entry-points."hf_adapters.backends"]
halfnat = "halfnat_backend:HalfNatBackend"
broken = "halfnat_no_such_module:HalfNatBackend"
notabackend = "halfnat_backend:CharCount"

[project.entry-points."hf_adapters.scorers"]
CharCount = "halfnat_backend:CharCount"

[tool.setuptools]
py-modules = ["halfnat_backend"]
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The folder ``pip install --target`` put the user's package (with its entry points) in."""
    source, target = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("site")
    (source / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (source / "halfnat_backend.py").write_text(USER_MODULE, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)
    return target


@pytest.fixture(scope="module")
def plain_module(tmp_path_factory) -> Path:
    """A folder holding ``my_plugin.py``, a plain module that registers the backend as ``plain``."""
    folder = tmp_path_factory.mktemp("plugins")
    registration = "\nfrom hf_adapters.backends import register_backend\n\n" \
                   "register_backend(type('PlainBackend', (HalfNatBackend,), {'name': 'plain'}))\n"
    (folder / "my_plugin.py").write_text(USER_MODULE + registration, encoding="utf-8")
    return folder


@pytest.fixture
def registries_kept():
    """The registries as they were, and no user module imported, after the test."""
    saved = dict(BACKENDS), dict(SCORERS), dict(ENGINES)
    yield
    for registry, before in zip((BACKENDS, SCORERS, ENGINES), saved, strict=True):
        registry.clear()
        registry.update(before)
    for module in ("halfnat_backend", "my_plugin"):
        sys.modules.pop(module, None)


@pytest.fixture
def on_path(installed, monkeypatch, registries_kept):
    """The installed package on ``sys.path`` of this process."""
    monkeypatch.syspath_prepend(str(installed))


def score_arguments(tmp_path: Path, model_dir: str, backend: str) -> list[str]:
    """``hf-adapters score``'s arguments for two rows, with a PPLScorer config naming ``backend``."""
    config = tmp_path / "config.yaml"
    config.write_text(f"name: PPLScorer\nbackend: {backend}\nmodel: {model_dir}\n", encoding="utf-8")
    data = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a", "instruction": "Say hi.", "output": "Hi there!"},
                                                 {"id": "b", "instruction": "Count.", "output": "One, two."}])
    return ["score", str(config), "--data", str(data), "--output", str(tmp_path / "scores.jsonl"), "--no-progress"]


def score_in_subprocess(tmp_path: Path, model_dir: str, backend: str, *, pythonpath: Path,
                        **environment: str) -> list[dict]:
    """Run ``hf-adapters score`` (:func:`score_arguments`) with ``pythonpath`` first on PYTHONPATH; its scores."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pythonpath), str(ROOT)]), "HF_HUB_OFFLINE": "1",
           **environment}
    done = subprocess.run([str(HF_ADAPTERS), *score_arguments(tmp_path, model_dir, backend)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return read_jsonl(tmp_path / "scores.jsonl")


def test_a_backend_installed_with_an_entry_point_scores_from_the_command_line(installed, model_dir, tmp_path):
    scores = score_in_subprocess(tmp_path, model_dir, "halfnat", pythonpath=installed)
    assert [row["id"] for row in scores] == ["a", "b"]
    assert all(math.isclose(row["score"], math.exp(0.5)) for row in scores), scores


def test_a_plugin_module_in_the_environment_registers_its_backend_before_the_config_is_read(
        plain_module, model_dir, tmp_path):
    scores = score_in_subprocess(tmp_path, model_dir, "plain", pythonpath=plain_module,
                                 HF_ADAPTERS_PLUGINS=" json, my_plugin ,")
    assert all(math.isclose(row["score"], math.exp(0.5)) for row in scores), scores


def test_a_plugin_module_named_by_the_option_registers_its_backend_before_the_config_is_read(
        plain_module, model_dir, tmp_path, monkeypatch, registries_kept):
    monkeypatch.syspath_prepend(str(plain_module))
    assert cli.main([*score_arguments(tmp_path, model_dir, "plain"), "--plugin", "my_plugin"]) == 0
    assert all(math.isclose(row["score"], math.exp(0.5)) for row in read_jsonl(tmp_path / "scores.jsonl"))


def test_entry_points_are_imported_only_for_a_name_not_registered(on_path):
    assert backend_class("transformers").name == "transformers"
    assert "halfnat_backend" not in sys.modules
    assert backend_class("halfnat").__name__ == "HalfNatBackend" and "halfnat_backend" in sys.modules
    assert BACKENDS["halfnat"] is backend_class("halfnat")
    scorer = scorer_class({"name": "CharCount"})()
    assert scorer.score_rows([{"text": "abc"}, {"text": ""}]) == [3.0, 0.0]


def test_unknown_names_list_the_entry_points_too(on_path):
    with pytest.raises(ValueError, match=r"Unknown backend 'nope'; valid backends: .*'broken'.*'halfnat'.*"
                                         r"'transformers'"):
        backend_class("nope")
    with pytest.raises(ConfigError, match=r"Unknown scorer 'Nope'; valid scorers: .*'CharCount'.*'PPLScorer'"):
        scorer_class({"name": "Nope"})
    assert "halfnat_backend" not in sys.modules


@pytest.mark.parametrize(("name", "problem"), [
    ("broken", r"cannot load the entry point broken = halfnat_no_such_module:HalfNatBackend \(group "
               r"hf_adapters.backends\): ModuleNotFoundError: No module named 'halfnat_no_such_module'"),
    ("notabackend", r"the entry point notabackend = halfnat_backend:CharCount \(group hf_adapters.backends\) "
                    r"names .*CharCount.*, not a LikelihoodBackend subclass"),
])
def test_a_broken_entry_point_is_one_line_naming_it(on_path, name, problem):
    with pytest.raises(ValueError, match=problem) as info:
        backend_class(name)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("way", ["--plugin", "HF_ADAPTERS_PLUGINS"])
def test_a_plugin_module_that_fails_to_import_is_one_error_line(way, tmp_path, capsys, monkeypatch):
    (tmp_path / "raising_plugin.py").write_text("raise RuntimeError('no GPU here')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["score", "config.yaml", "--data", "rows.jsonl", "--output", str(tmp_path / "out.jsonl")]
    if way == "--plugin":
        args += ["--plugin", "json", "--plugin", "no_such_plugin_module"]
        expected = "error: cannot import the plugin module 'no_such_plugin_module' (--plugin): ModuleNotFoundError: " \
                   "No module named 'no_such_plugin_module' (is its folder on PYTHONPATH?)"
    else:
        monkeypatch.setenv("HF_ADAPTERS_PLUGINS", "raising_plugin")
        expected = "error: cannot import the plugin module 'raising_plugin' (HF_ADAPTERS_PLUGINS): RuntimeError: " \
                   "no GPU here"
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("command", ["score", "perplexity", "parity", "demo"])
def test_the_commands_that_take_a_model_take_plugins(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--plugin MODULE" in text and "HF_ADAPTERS_PLUGINS" in text and "hf_adapters.backends" in text



@pytest.fixture
def plugin_folder(tmp_path, monkeypatch, registries_kept):
    """Write a plugin module into a folder on ``sys.path``: ``write(name, code)``; the modules written
    are forgotten afterwards, and the registries are as they were."""
    folder, written = tmp_path / "plugin_modules", []
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))

    def write(name: str, code: str) -> str:
        (folder / f"{name}.py").write_text(code, encoding="utf-8")
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def plugin_error(way: str, module: str, tmp_path: Path, capsys, monkeypatch, *flags: str) -> str:
    """The error ``score ... flags`` prints for the plugin ``module``, named by ``way``; asserts exit
    status 2, one line, and no output written."""
    args = ["score", "config.yaml", "--data", "rows.jsonl", "--output", str(tmp_path / "out.jsonl"), *flags]
    if way == "--plugin":
        args += ["--plugin", module]
    else:
        monkeypatch.setenv("HF_ADAPTERS_PLUGINS", module)
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "out.jsonl").exists()
    return err


TAKES_PPL_SCORER = '''
from hf_adapters.scorers import RowScorer, register_scorer


@register_scorer
class MyPPL(RowScorer):
    name = "PPLScorer"
'''

TAKES_TRANSFORMERS = '''
from hf_adapters.backends import TransformersBackend, register_backend


class Patched(TransformersBackend):
    pass


register_backend(Patched)
'''


@pytest.mark.parametrize("way", ["--plugin", "HF_ADAPTERS_PLUGINS"])
@pytest.mark.parametrize(("code", "kind", "name"), [(TAKES_PPL_SCORER, "scorer", "PPLScorer"),
                                                    (TAKES_TRANSFORMERS, "backend", "transformers")])
def test_a_plugin_registering_under_a_built_in_name_is_refused_naming_the_plugin_and_the_name(
        plugin_folder, way, code, kind, name, tmp_path, capsys, monkeypatch):
    """A plugin may not replace ``PPLScorer`` or ``transformers``: the same config would write other scores.

    Round five, item 4."""
    from hf_adapters.backends import TransformersBackend
    from hf_adapters.scorers import PPLScorer

    module = plugin_folder("takes_a_builtin", code)
    err = plugin_error(way, module, tmp_path, capsys, monkeypatch)
    assert f"the plugin module 'takes_a_builtin' ({way})" in err
    assert f"cannot be registered as the {kind} '{name}': that is the built-in" in err
    assert "Give the class a `name` of its own" in err
    assert SCORERS["PPLScorer"] is PPLScorer and BACKENDS["transformers"] is TransformersBackend


def test_a_plugin_replacing_a_built_in_in_the_registry_itself_is_refused(plugin_folder, tmp_path, capsys,
                                                                          monkeypatch):
    """Assigning to ``BACKENDS`` or ``SCORERS`` is caught as well as ``register_*``.

    Round five, item 4."""
    module = plugin_folder("assigns_a_builtin", "from hf_adapters.backends import BACKENDS\n"
                           "from hf_adapters.scorers import SCORERS\n\n"
                           "BACKENDS['vllm'] = BACKENDS['transformers']\nSCORERS['IFDScorer'] = SCORERS['PPLScorer']\n")
    err = plugin_error("--plugin", module, tmp_path, capsys, monkeypatch)
    assert err == ("error: the plugin module 'assigns_a_builtin' (--plugin) replaced the built-in backend 'vllm' and "
                   "scorer 'IFDScorer' in the registry; register its class under a name of its own and name that in "
                   "the config.\n")


def test_a_plugin_replacing_the_default_engine_in_the_registry_itself_is_refused(plugin_folder, tmp_path, capsys,
                                                                                  monkeypatch):
    """``ENGINES["local"] = X`` silently replaced the engine every `score` without --engine runs.

    Round six: engines in the plugin registries."""
    module = plugin_folder("assigns_the_local_engine", "from hf_adapters.engines import ENGINES, Engine\n\n\n"
                           "class Quiet(Engine):\n    def run(self, job):\n        return None\n\n"
                           "    def interrupted_message(self, job):\n        return ''\n\n\n"
                           "ENGINES['local'] = Quiet\n")
    err = plugin_error("--plugin", module, tmp_path, capsys, monkeypatch)
    assert err == ("error: the plugin module 'assigns_the_local_engine' (--plugin) replaced the built-in engine "
                   "'local' in the registry; register its class under a name of its own and name that with "
                   "--engine.\n")


#: An engine that adds Ray's --num-workers again.
REPEATS_NUM_WORKERS = """from hf_adapters.engines import Engine, register_engine


@register_engine
class Repeats(Engine):
    name = "repeats"

    @classmethod
    def add_arguments(cls, group):
        group.add_argument("--num-workers", type=int, default=None)

    def run(self, job):
        return None

    def interrupted_message(self, job):
        return ""
"""

#: An engine without ``run``.
RUNS_NOTHING = """from hf_adapters.engines import Engine, register_engine


@register_engine
class RunsNothing(Engine):
    name = "runs-nothing"

    def interrupted_message(self, job):
        return ""
"""


@pytest.mark.parametrize(("code", "engine", "said"), [
    (REPEATS_NUM_WORKERS, "repeats", "error: the engine 'repeats' (repeats_an_option.Repeats) adds the option "
     "--num-workers, which the engine 'ray' has already: give its options names of their own in its add_arguments"),
    (RUNS_NOTHING, "runs-nothing", "error: cannot import the plugin module 'repeats_an_option' (--plugin): "
     "ValueError: repeats_an_option.RunsNothing cannot be registered as the engine 'runs-nothing': it does not define "
     "run, which every Engine subclass must define; see docs/guides/adding_an_engine.md.")],
    ids=["repeats --num-workers", "lacks run"])
def test_an_engine_plugin_that_cannot_be_run_is_one_error_line_saying_why(plugin_folder, code, engine, said,
                                                                          tmp_path, capsys, monkeypatch):
    """An engine repeating another's option (argparse's conflict) or lacking ``run`` (instantiating an
    abstract class) stopped `score` with a traceback.

    Round six: engine plugins."""
    module = plugin_folder("repeats_an_option", code)
    err = plugin_error("--plugin", module, tmp_path, capsys, monkeypatch, "--engine", engine)
    assert err.startswith(said), err


#: A plugin whose engine is the local engine under another name, and a scorer without a model.
SUBCLASSES_LOCAL = """from hf_adapters.engines import LocalEngine, register_engine
from hf_adapters.scorers import RowScorer, register_scorer


@register_engine
class MyLocal(LocalEngine):
    name = "my-local"


@register_scorer
class Letters(RowScorer):
    name = "Letters"
    roles = {"output": "output"}
    text_roles = ("output",)

    def score_batch(self, batch, first_row=0):
        return {"score": [float(len(text)) for text in self.read_texts(batch, first_row)["output"]]}
"""


def test_an_engine_plugin_subclassing_the_local_engine_takes_its_options(plugin_folder, tmp_path, capsys):
    """A subclass of LocalEngine inherits its --save-every: adding it twice was argparse's conflict, a
    traceback. It is taken by both engines now, and refused with neither.

    Round six: engine plugins."""
    module = plugin_folder("subclasses_local", SUBCLASSES_LOCAL)
    data = write_jsonl(tmp_path / "rows.jsonl", [{"output": "x" * i} for i in range(5)])
    (tmp_path / "letters.yaml").write_text("name: Letters\n", encoding="utf-8")
    args = ["score", str(tmp_path / "letters.yaml"), "--data", str(data), "--no-progress", "--plugin", module]
    for engine in ("my-local", "local"):
        assert cli.main([*args, "--output", str(tmp_path / f"{engine}.jsonl"), "--engine", engine,
                         "--save-every", "2"]) == 0, capsys.readouterr().err
        assert read_jsonl(tmp_path / f"{engine}.jsonl") == [{"id": i, "score": float(i)} for i in range(5)]
    assert cli.main([*args, "--output", str(tmp_path / "ray.jsonl"), "--engine", "my-local", "--num-workers", "2"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: --num-workers: only with --engine ray."


def test_registering_a_built_in_class_again_or_a_new_name_is_still_allowed(registries_kept):
    """Only another class under a built-in's name is refused.

    Round five, item 4."""
    from hf_adapters.backends import TransformersBackend, register_backend
    from hf_adapters.scorers import PPLScorer, register_scorer

    assert register_backend(TransformersBackend) is TransformersBackend
    assert register_scorer(PPLScorer) is PPLScorer
    renamed = register_scorer(type("MyPPL", (PPLScorer,), {"name": "MyPPL"}))
    assert SCORERS["MyPPL"] is renamed and SCORERS["PPLScorer"] is PPLScorer
    with pytest.raises(ValueError, match=r"cannot be registered as the scorer 'PPLScorer'"):
        register_scorer(type("Inherits", (PPLScorer,), {}))  # a subclass keeps its parent's name


@pytest.mark.parametrize("way", ["--plugin", "HF_ADAPTERS_PLUGINS"])
@pytest.mark.parametrize(("call", "shown"), [("sys.exit(0)", "sys.exit(0)"), ("sys.exit()", "sys.exit(None)"),
                                             ("sys.exit('no GPU here')", "sys.exit('no GPU here')")])
def test_a_plugin_module_calling_sys_exit_at_import_is_reported_like_any_plugin_failure(
        plugin_folder, way, call, shown, tmp_path, capsys, monkeypatch):
    """``sys.exit(0)`` in a plugin made ``score`` exit 0 with no output and no word.

    Round five, item 16."""
    module = plugin_folder("exits_at_import", f"import sys\n\n{call}\n")
    err = plugin_error(way, module, tmp_path, capsys, monkeypatch)
    assert err == (f"error: cannot import the plugin module 'exits_at_import' ({way}): it called {shown} while being "
                   "imported; a plugin module should only define and register its classes\n")
