"""The ``infersim`` command line.

One boundary for everything that can go wrong:

- bad input (a file, a field, a flag, a table row, a model that does not fit, a run too large
  to simulate) prints one message naming the file and field or the flag, and exits 2;
- Ctrl-C exits 130 and SIGTERM 143, each with one line and no traceback, leaving any results
  folder as it was (:mod:`simulator.cli.output`);
- anything else is a bug: exit 1 with a short message asking for a report (the traceback
  with ``--debug``);
- :class:`~simulator.errors.InfersimWarning`\\ s print as ``infersim: warning: ...``.

Only this package writes files, and only through :class:`~simulator.cli.output.ResultsFolder`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

from simulator.cli.parser import build_parser
from simulator.errors import InfersimError, InfersimWarning

EXIT_BAD_INPUT = 2  # also `plan` when no fleet within the limits can meet the targets
EXIT_BUG = 1
EXIT_BROKEN_PIPE = 1  # as the Python documentation's SIGPIPE note recommends
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that cleanup (worker pools, staging folders) runs."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    print(f"infersim: warning: {message}", file=sys.stderr)


@contextlib.contextmanager
def _user_warnings() -> Iterator[None]:
    """Every InfersimWarning printed as one line, each time it occurs."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", InfersimWarning)
        previous = warnings.showwarning
        warnings.showwarning = _show_warning
        try:
            yield
        finally:
            warnings.showwarning = previous


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("infersim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else None
    try:
        with _user_warnings():
            module, function = args.handler.split(":")
            handler: Callable[[Any], int] = getattr(importlib.import_module(module), function)
            return handler(args)
    except InfersimError as exc:
        print(f"infersim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("infersim: interrupted; no results folder was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("infersim: terminated; no results folder was written", file=sys.stderr)
        return EXIT_TERMINATED
    except BrokenPipeError:  # the reader (e.g. `| head`) closed early: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a bug: say so briefly, the traceback on request
        if args.debug:
            traceback.print_exc()
        print(
            f"infersim: internal error: {type(exc).__name__}: {exc}\n"
            f"This is a bug in infersim. Please report it with the command you ran"
            f"{'' if args.debug else ' (rerun with --debug for the traceback)'}.",
            file=sys.stderr,
        )
        return EXIT_BUG
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
