"""What the package prints for the person at the terminal beside its results: its own warnings as one line
(:func:`warn_user`), log lines above the progress bars rather than inside them (:class:`LogAboveBarsHandler`), and
progress bars that draw their last line once (:func:`progress_bar`)."""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` for the package's user: shown (where Python's filters show it, as any warning) as one line,
    ``Category: message``, without the line of the package's source that Python's format adds below it, and above
    the progress bars drawn on stderr rather than at the end of a bar's line."""
    from tqdm import tqdm

    with tqdm.external_write_mode(file=sys.stderr), _one_line_format(category):
        warnings.warn(message, category, stacklevel=2)


@contextmanager
def _one_line_format(category: type[Warning]) -> Iterator[None]:
    """``warnings.formatwarning`` writing warnings of ``category`` as one line while the body runs."""
    original = warnings.formatwarning

    def one_line(message, shown: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
        if issubclass(shown, category):
            return f"{shown.__name__}: {message}\n"
        return original(message, shown, filename, lineno, line)

    warnings.formatwarning = one_line
    try:
        yield
    finally:
        warnings.formatwarning = original


class LogAboveBarsHandler(logging.StreamHandler):
    """A stream handler that writes each record with ``tqdm.write``: above the progress bars drawn on its stream,
    which are drawn again below it, instead of at the end of a bar's line."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except Exception:  # as logging.StreamHandler: a failing handler must not stop the program
            self.handleError(record)


def progress_bar(**options: Any) -> Any:
    """A ``tqdm.auto`` bar (tqdm's ``options``) whose last line is drawn once: closing it ends the line its last
    update drew where that line shows the final count, rather than drawing the line again after it (as tqdm does,
    which a log, unlike a terminal, shows as a second line)."""
    from tqdm.auto import tqdm

    class _LastLineOnce(tqdm):
        def close(self) -> None:
            self._last_line_drawn = not self.disable and self.n == getattr(self, "last_print_n", None)
            super().close()

        def display(self, msg: str | None = None, pos: int | None = None, **more: Any) -> bool:
            if msg is None and getattr(self, "_last_line_drawn", False):
                return True
            return super().display(msg, pos, **more)

    return _LastLineOnce(**options)
