"""The errors and warnings infersim raises for its users, in one place.

Every error a user can cause (a bad file, a flag out of range, a model that does not fit, a
run too large to simulate) is an :class:`InfersimError`: the command line prints its message
and exits with status 2. Anything else escaping a command is a bug (exit status 1).
Situations a user should know about but that do not stop a command (a trace replayed in
sorted order, a concurrency above what the KV cache holds) are :class:`InfersimWarning`\\ s,
printed by the command line as ``infersim: warning: ...``.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable, Iterator


class InfersimError(ValueError):
    """Bad input or an impossible request; the message names the file, the field and what was expected."""


class ConfigError(InfersimError):
    """Bad input: a file, a field path and what was expected."""


class InfersimWarning(UserWarning):
    """Something happened that changes how a result reads; the message says what."""


@contextlib.contextmanager
def naming(source: str) -> Iterator[None]:
    """An :class:`InfersimError` raised inside names ``source`` first (the file whose content led
    to it), unless its message already starts with it; the error keeps its class."""
    try:
        yield
    except InfersimError as exc:
        if str(exc).startswith(source):
            raise
        raise type(exc)(f"{source}: {exc}") from exc


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the closest of ``known`` to a mistyped ``given``
    (:func:`difflib.get_close_matches`, similarity >= 0.6), or ``""`` when none is close."""
    close = difflib.get_close_matches(given, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
