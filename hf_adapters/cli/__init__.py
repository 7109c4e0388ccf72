"""The ``hf-adapters`` command line (also ``python -m hf_adapters``): one module per subcommand.

Nothing outside this package imports from it. The subcommands' modules are imported by :func:`main`
itself, so that a Ctrl-C while the command starts is answered like one at any later point: one line
saying what is saved, and exit status 130 (:data:`INTERRUPTED`). A SIGTERM (what Slurm, Kubernetes and
``timeout`` send) is answered with the same line, and exit status 143 (:data:`TERMINATED`).
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import importlib
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from types import FrameType
from typing import Any

from hf_adapters.cli.exit_status import BROKEN_PIPE, INTERRUPTED, TERMINATED

logger = logging.getLogger(__name__)

#: The subcommands' modules, in this package.
SUBCOMMANDS = ("compare_command", "demo_command", "embed_command", "estimate_command", "ifeval_command",
               "lm_eval_command", "parity_command", "perplexity_command", "score_command", "select_command",
               "summary_command")
#: What a Ctrl-C before the command itself has begun says.
INTERRUPTED_STARTING = "Interrupted while starting, before anything was written; run the same command again."


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where a Ctrl-C raises KeyboardInterrupt: every command stops on it as on a
    Ctrl-C, saying what is saved, and :func:`main` returns :data:`TERMINATED`."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-adapters", description="Exact, batched language-model scores for language data."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f".{name}", __name__).add_parser(subparsers)
    for subparser in subparsers.choices.values():
        if not subparser.get_default("passes_arguments_on"):
            subparser.add_argument("-v", "--verbose", action="store_true",
                                   help="also log the details kept at debug level: the CPU kernels' timings, the "
                                   "hub's reachability...")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` gives (default: this process's arguments); its exit status.

    A Ctrl-C (SIGINT) at any point, while the command starts included, prints one line saying what
    is saved and returns :data:`INTERRUPTED`. Where ``argv`` is None (the process is this command),
    a SIGTERM does the same and returns :data:`TERMINATED`, and a second signal while the first is
    being handled exits at once. Output piped into a reader that stops early (``| head``) ends the
    command quietly with :data:`BROKEN_PIPE`, as a shell's tools end."""
    state: dict[str, Any] = {}
    with _signals_watched(process=argv is None) as watch:
        try:
            status = _main(argv, state, watch)
        except BrokenPipeError:
            # The reader is gone: later writes (and the interpreter's last flush) go nowhere, quietly.
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return BROKEN_PIPE
        except BaseException as error:
            if not (isinstance(error, KeyboardInterrupt) or watch.received):
                raise
            message = interrupted_message(state.get("args"), interrupted_imports(error))
        else:
            return watch.status if watch.received and status == INTERRUPTED else status
        print(message, file=sys.stderr, flush=True)
        return watch.status if watch.received else INTERRUPTED


def _main(argv: Sequence[str] | None, state: dict[str, Any], watch: _SignalWatch) -> int:
    from hf_adapters.core.openmp import wait_passively

    wait_passively()  # before any command imports torch
    from hf_adapters.cli.arguments import import_plugins, progress_settings_kept
    from hf_adapters.core.console import LogAboveBarsHandler
    from hf_adapters.core.plugins import PluginError

    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[LogAboveBarsHandler()])
    from hf_adapters.engines import ENGINES

    try:
        parser = build_parser()  # a ValueError for engines whose options clash
        args, rest = parser.parse_known_args(argv)
        parsed_engines = set(ENGINES)
        with _stdout_held_unless(watch):
            import_plugins(args)
            if _engine_added(args, parsed_engines):  # a plugin's or a package's engine: its options join the parser
                parser = build_parser()
                args, rest = parser.parse_known_args(argv)
    except (PluginError, ValueError) as error:
        if watch.received:  # the Ctrl-C, turned into an error by the module it stopped
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    if getattr(args, "passes_arguments_on", False):
        args.arguments = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    state["args"] = args
    with progress_settings_kept(), _package_logging(getattr(args, "verbose", False)):
        if watch.ignored:
            logger.debug("SIGINT is ignored in this process (as a shell starts a background job): Ctrl-C does not "
                         "stop this command.")
        return args.run(args) or 0


def _engine_added(args: argparse.Namespace, parsed: set[str]) -> bool:
    """Whether the engine ``--engine`` names was not among the ``parsed`` ones the parser was built with:
    registered since by a plugin module, or declared by an installed package (registered now); a ValueError
    for an unknown one."""
    from hf_adapters.engines import engine_class

    if getattr(args, "engine", None) is None:
        return False
    engine_class(args.engine)
    return args.engine not in parsed


def interrupted_message(args: argparse.Namespace | None, importing: Sequence[str] = ()) -> str:
    """The one line a Ctrl-C prints: that the command was starting (no ``args`` yet); else what the
    command's module says it saved (its ``interrupted_message(args)``); else, stopped while
    ``importing`` modules, that it was loading its libraries; else that it saved nothing complete.

    A module whose import the Ctrl-C stopped is not imported again: a library's compiled part left
    half set up can crash the process when it is loaded a second time."""
    if args is None:
        return INTERRUPTED_STARTING
    said = getattr(sys.modules.get(args.run.__module__), "interrupted_message", None)
    if said is not None:
        try:
            with _not_imported_again(importing):
                return said(args)
        except Exception:  # noqa: BLE001 - what was saved cannot be read now: say what is certain
            logger.debug("Could not tell what the interrupted command saved.", exc_info=True)
    if importing:
        return (f"Interrupted while `hf-adapters {args.command}` was loading its libraries, before it wrote anything; "
                "run the same command again.")
    return (f"Interrupted: `hf-adapters {args.command}` stopped before it finished, so it saved nothing complete; "
            "run the same command again.")


def interrupted_imports(error: BaseException) -> list[str]:
    """The modules being imported when ``error`` (or an error it was raised while handling) came: those
    whose own code is among its frames (importlib leaves its frames out of tracebacks)."""
    names: list[str] = []
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback = error.__traceback__
        while traceback is not None:
            if traceback.tb_frame.f_code.co_name == "<module>":
                names.append(traceback.tb_frame.f_globals.get("__name__", ""))
            traceback = traceback.tb_next
        error = error.__cause__ or error.__context__
    return [name for name in dict.fromkeys(names) if name]


class _RefuseImports:
    """A finder that refuses to import the modules ``names`` (and the modules inside them)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if any(name == refused or name.startswith(f"{refused}.") for refused in self.names):
            raise ImportError(f"{name} was being imported when the Ctrl-C came; it is not imported again.")


@contextmanager
def _not_imported_again(names: Sequence[str]) -> Iterator[None]:
    """While the body runs, an import of one of ``names`` (not in ``sys.modules``) raises ImportError."""
    finder = _RefuseImports(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


@contextmanager
def _stdout_held_unless(watch: _SignalWatch) -> Iterator[None]:
    """What the body prints to stdout, written after it unless a Ctrl-C came: a library whose import
    the Ctrl-C cuts short may print its own "Error importing ..." line, and the command's one line on
    stderr is then all that a Ctrl-C leaves."""
    held = io.StringIO()
    try:
        with redirect_stdout(held):
            yield
    finally:
        if not watch.received:
            sys.stdout.write(held.getvalue())


@contextmanager
def _package_logging(verbose: bool) -> Iterator[None]:
    """This package's messages shown while the body runs: from INFO, or from DEBUG with ``verbose``.
    Other libraries' show from WARNING (the root logger's level), as they do outside this command."""
    package = logging.getLogger("hf_adapters")
    level = package.level
    package.setLevel(logging.DEBUG if verbose else logging.INFO)
    try:
        yield
    finally:
        package.setLevel(level)


class _SignalWatch:
    """Whether a SIGINT or a SIGTERM came while a command ran (a library may turn the KeyboardInterrupt
    it raises into another error), the exit status it asks for, and what a second one does.

    A signal handled while a finalizer (``__del__``) runs raises its KeyboardInterrupt there, where
    Python can only report it as "Exception ignored" and go on: :meth:`unraisable` (the process's
    ``sys.unraisablehook`` while watched) raises it again in the main thread instead."""

    def __init__(self, process: bool) -> None:
        self.process, self.received, self.ignored, self.lost = process, False, False, False
        self.signum = signal.SIGINT
        self.unraisablehook = sys.unraisablehook

    @property
    def status(self) -> int:
        """The exit status of a command the signal received stopped: :data:`TERMINATED` for a SIGTERM,
        else :data:`INTERRUPTED`."""
        return TERMINATED if self.signum == signal.SIGTERM else INTERRUPTED

    def stop(self) -> KeyboardInterrupt:
        """What the signal received raises: a KeyboardInterrupt, a :class:`Terminated` for a SIGTERM."""
        return Terminated() if self.signum == signal.SIGTERM else KeyboardInterrupt()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.lost:  # the first signal again, not a second one
            self.lost = False
            raise self.stop()
        if self.received and self.process:
            print("Interrupted again: stopped at once.", file=sys.stderr, flush=True)
            os._exit(self.status)
        self.received, self.signum = True, signum
        raise self.stop()

    def unraisable(self, unraisable: Any) -> None:
        if self.received and isinstance(unraisable.exc_type, type) and issubclass(unraisable.exc_type,
                                                                                  KeyboardInterrupt):
            self.lost = True  # raised again from another thread once the finalizer is left (else lost again)
            again = threading.Timer(0.01, self.send_again)
            again.daemon = True
            again.start()
        else:
            self.unraisablehook(unraisable)

    def send_again(self) -> None:
        """The lost signal again, unless another signal raised it meanwhile: sent to the main thread,
        which wakes it from a sleep (simulated where threads cannot be signalled: Windows)."""
        if not self.lost:
            return
        if hasattr(signal, "pthread_kill"):
            signal.pthread_kill(threading.main_thread().ident, self.signum)
        else:
            _thread.interrupt_main(self.signum)


@contextmanager
def _signals_watched(process: bool) -> Iterator[_SignalWatch]:
    """Watch SIGINT while the body runs, where Python's own handler would raise KeyboardInterrupt
    (the main thread, a handler not set by the caller), and, where the process is this command,
    SIGTERM where it has its default action (ending the process without a word). A signal ignored
    from the start (a background job of a shell without job control ignores SIGINT) stays ignored, as
    the shell meant; ``--verbose`` says so of SIGINT. A process stopped by one ignores both once the
    command has returned: while it exits, Python puts back the default actions, and a second signal
    would end it by the signal instead of its exit status."""
    watch = _SignalWatch(process)
    if threading.current_thread() is not threading.main_thread():
        yield watch
        return
    previous = {signal.SIGINT: signal.getsignal(signal.SIGINT), signal.SIGTERM: signal.getsignal(signal.SIGTERM)}
    watch.ignored = previous[signal.SIGINT] is signal.SIG_IGN
    watched = [signal.SIGINT] if previous[signal.SIGINT] is signal.default_int_handler else []
    watched += [signal.SIGTERM] if process and previous[signal.SIGTERM] is signal.SIG_DFL else []
    if not watched:
        yield watch
        return
    for signum in watched:
        signal.signal(signum, watch)
    sys.unraisablehook = watch.unraisable
    try:
        yield watch
    finally:
        for signum in watched:
            signal.signal(signum, signal.SIG_IGN if process and watch.received else previous[signum])
        sys.unraisablehook = watch.unraisablehook
