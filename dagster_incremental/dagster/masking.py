"""Log masking: secret values become `***` in the run's log records, errors and tracebacks.

A Dagster-side concern: the asset's run wraps `context.log` and the process's log records with a
`Redactor` built from the secrets read for that run (`settings.secrets`), so nothing Dagster
stores (event log, run, job snapshot) holds a value. Masking matches the exact text of each
string value and its URL- and JSON-escaped forms.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import traceback
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from dagster_incremental.errors import IncrementalError
from dagster_incremental.settings.secrets import MASK

__all__ = ["MASK", "RedactedError", "Redactor"]


class RedactedError(IncrementalError):
    """An error whose text held a secret, re-raised with each secret replaced by `***`.

    The original exception is dropped (`from None`) so its secret-bearing text is never
    serialized; this one keeps its type name and the masked traceback for debugging.
    """



class Redactor:
    """Replaces secret values by `***` in text, exceptions and log records."""

    def __init__(self, values: Iterable[str]) -> None:
        forms: set[str] = set()
        for value in values:
            if isinstance(value, str) and value:
                forms.update({value, urllib.parse.quote(value, safe=""),
                              urllib.parse.quote_plus(value), json.dumps(value)[1:-1],
                              repr(value)[1:-1]})
        forms.discard("")
        # Longest first, so a secret that contains another one is masked whole.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def redact(self, text: str) -> str:
        return self._pattern.sub(MASK, text) if self._pattern is not None else text

    def found_in(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def leaks(self, exc: BaseException) -> bool:
        """Does the exception's message, cause/context chain or traceback hold a secret?"""
        return self._pattern is not None and self.found_in(_format(exc))

    def describe(self, exc: BaseException) -> str:
        """`Type: message` and the whole traceback (with chain), secrets masked. The message is
        said once: the traceback ends at the last frame, not with the message again."""
        last = list(traceback.format_exception_only(type(exc), exc))
        stack = list(traceback.TracebackException.from_exception(exc).format())
        stack = stack[: len(stack) - len(last)] if stack[-len(last):] == last else stack
        return (self.redact("".join(last).strip()) + "\n\nTraceback (secret values replaced by "
                f"{MASK}):\n" + self.redact("".join(stack)))

    def checked(self, exc: BaseException, prefix: str = "") -> BaseException | None:
        """A RedactedError to raise `from None` in place of `exc` when it leaks, else None."""
        if not self.leaks(exc):
            return None
        return RedactedError(prefix + self.describe(exc))

    def mask_record(self, record: logging.LogRecord) -> None:
        """Rewrite a log record in place: message (and an attached exception) masked."""
        if self._pattern is None:
            return
        try:
            message = record.getMessage()
        except Exception:  # a malformed %-format: leave it to logging's own error handling
            return
        if self.found_in(message):
            record.msg, record.args = self.redact(message), ()
        exc = record.exc_info[1] if isinstance(record.exc_info, tuple) else None
        if exc is not None and self.leaks(exc):
            record.msg = f"{record.msg}\n{self.describe(exc)}"
            record.args, record.exc_info, record.exc_text = (), None, None

    @contextlib.contextmanager
    def masking_logs(self, *loggers: logging.Logger) -> Iterator[None]:
        """While inside, log records have secrets masked before any handler (the event log) sees them.

        Two layers: a filter on `loggers` (e.g. `context.log`), which nothing can bypass, and a
        process-wide log record factory, which also covers `get_dagster_logger()` and the Python
        loggers Dagster captures (records made in other threads meanwhile are masked too).
        """
        if not self:
            yield
            return
        filt = _MaskingFilter(self)
        for logger in loggers:
            logger.addFilter(filt)
        _install_record_factory()
        with _ACTIVE_LOCK:
            _ACTIVE.append(self)
        try:
            yield
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.remove(self)
            for logger in loggers:
                logger.removeFilter(filt)


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


class _MaskingFilter(logging.Filter):
    """A logger filter that rewrites the record before any handler (Dagster's event log) sees it."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        self.redactor.mask_record(record)
        return True


_ACTIVE: list[Redactor] = []  # redactors of the runs in progress in this process
_ACTIVE_LOCK = threading.Lock()
_FACTORY: list[Callable[..., logging.LogRecord]] = []  # ours, once installed


def _install_record_factory() -> None:
    """Chain a masking factory in front of the current one, once per process (never removed:
    with no run in progress it only passes records through)."""
    with _ACTIVE_LOCK:
        if _FACTORY:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            for redactor in tuple(_ACTIVE):
                redactor.mask_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _FACTORY.append(factory)
