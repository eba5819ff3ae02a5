"""The ``infersim`` command line.

One boundary for everything that can go wrong:

- bad input (a file, a field, a flag, a table row, a model that does not fit, a run too large
  to simulate) prints one message naming the file and field or the flag, and exits 2; so does
  a usage error argparse finds (one ``infersim: error:`` line, no usage block);
- Ctrl-C exits 130 and SIGTERM 143, each with one line and no traceback, leaving any results
  folder as it was (:mod:`simulator.cli.output`), except the runs a long command (``sweep``,
  ``plan``, ``compare``, ``run`` with several values) finished, which it keeps and names; the
  package's imports happen inside :func:`main`, so a Ctrl-C while they run is caught too. Where
  SIGTERM's raise lands in a finaliser (Python ignores it there), a long command still stops at
  its next finished run and never writes its full results (:func:`stop_if_terminated`);
- a failure of the operating system is one line naming the path and the system's reason
  (``infersim: error: PATH: REASON``, no traceback): exit 74 (``EX_IOERR`` of ``sysexits.h``)
  when the device cannot store what is written (full, over quota, failing), standard output
  included (``infersim ... > /dev/full``); exit 2 for anything else (a name too long, a loop of
  symbolic links, a missing folder, the current folder deleted), as for other bad input;
- anything else is a bug: exit 1 with a short message asking for a report (the traceback
  with ``--debug``);
- :class:`~simulator.errors.InfersimWarning`\\ s print as ``infersim: warning: ...``.

Only this package writes files, and only through :class:`~simulator.cli.output.ResultsFolder`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

from simulator.errors import InfersimError, InfersimWarning

EXIT_BAD_INPUT = 2
EXIT_BUG = 1
EXIT_BROKEN_PIPE = 1  # as the Python documentation's SIGPIPE note recommends
EXIT_DEVICE = 74  # EX_IOERR (sysexits.h): the device could not store the output
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that cleanup (worker pools, staging folders) runs."""


#: Seconds the cleanup after SIGTERM may take before the process exits regardless: the raise can
#: land where Python swallows exceptions (a fork handler of the logging module, a finaliser), and
#: then nothing else would end the command.
TERMINATE_GRACE_S = 5.0


def _terminate_now() -> None:
    print("infersim: terminated; no results folder was written", file=sys.stderr, flush=True)
    os._exit(EXIT_TERMINATED)


#: Set by SIGTERM: where its raise was swallowed (in a finaliser), a long command still stops at its
#: next finished run and before its last write (:func:`stop_if_terminated`), not reporting success.
_SIGTERM_RECEIVED = threading.Event()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _SIGTERM_RECEIVED.set()
    watchdog = threading.Timer(TERMINATE_GRACE_S, _terminate_now)
    watchdog.daemon = True
    watchdog.start()
    raise Terminated


def _unraisable(unraisable: Any) -> None:
    """Python's report of an exception it could not raise (in a finaliser), but a SIGTERM's: that
    one is not lost (:func:`stop_if_terminated`), so it prints no traceback."""
    if not isinstance(unraisable.exc_value, Terminated):
        sys.__unraisablehook__(unraisable)


def stop_if_terminated(kept: str) -> None:
    """Raise :class:`Terminated` (leaving ``kept``) if a SIGTERM came whose own raise was lost."""
    if _SIGTERM_RECEIVED.is_set():
        exc = Terminated()
        exc.kept = kept  # type: ignore[attr-defined]
        raise exc


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


def _exit_interrupted(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C before a command starts (nothing written yet): one line, exit 130, at once.

    Not a KeyboardInterrupt: raised inside an import's ``exec`` (dataclasses and pydantic
    build classes so), CPython marks it unhandled and the process dies by SIGINT even when caught.
    """
    print("infersim: interrupted; no results folder was written", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)


def _start(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Callable[[Any], int]]:
    """The parsed arguments and the command's function: the package's imports happen here.

    They run without the cyclic garbage collector, and what they made is then set aside from it
    (:func:`gc.freeze`, in :func:`_command`): some 76,000 tracked objects (modules, classes,
    pydantic schemas) that live as long as the command, which the collector would otherwise scan
    about a hundred times while importing and again at each full collection of the simulation,
    40-65 ms of CPU on the 1k-request bench reference (1 ms with them set aside).
    """
    from simulator.cli.parser import build_parser

    args = build_parser().parse_args(argv)
    module, function = args.handler.split(":")
    return args, getattr(importlib.import_module(module), function)


def one_blas_thread() -> None:
    """Keep numpy's OpenBLAS to one thread, unless the user set a count.

    Imported, OpenBLAS starts a thread per core and they spin waiting for work: 50-150 ms of CPU
    per command on 2 cores, with no gain, since no command makes a matrix product large enough
    to split (the simulation makes none; ``calibrate`` solves small least-squares problems).
    Set before numpy loads, so in :func:`main` ahead of the package's imports.
    """
    if not os.environ.keys() & {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}:  # OpenBLAS reads these
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def main(argv: Sequence[str] | None = None) -> int:
    one_blas_thread()
    try:
        return _command(argv)
    finally:
        gc.unfreeze()  # what the start-up set aside is collected again (a caller may run many commands)


def _command(argv: Sequence[str] | None) -> int:
    started = _parse(argv)
    if isinstance(started, int):
        return started
    return _handle(*started)


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Callable[[Any], int]] | int:
    """The parsed arguments and the command's handler, or the exit status of a usage error, ``--help``
    or ``--version`` (SIGINT exits at once while the command's modules are imported)."""
    on_interrupt = signal.signal(signal.SIGINT, _exit_interrupted) if _main_thread() else None
    collecting = gc.isenabled()
    gc.disable()  # the imports make only long-lived objects: see _start
    try:
        return _start(argv)
    except InfersimError as exc:  # a usage error (UsageError)
        print(f"infersim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
        if on_interrupt is not None:
            signal.signal(signal.SIGINT, on_interrupt)


def _handle(args: argparse.Namespace, handler: Callable[[Any], int]) -> int:
    """Run the command; each way it can end is one exit status and at most one line on stderr."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else None
    _SIGTERM_RECEIVED.clear()
    unraisable, sys.unraisablehook = sys.unraisablehook, _unraisable
    try:
        with _user_warnings(), _stdout_named():
            code = handler(args)
            sys.stdout.flush()  # a full device fails here, not after the command returned
        return code
    except InfersimError as exc:
        print(f"infersim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        print(f"infersim: interrupted; {_kept(exc)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated as exc:
        print(f"infersim: terminated; {_kept(exc)}", file=sys.stderr)
        return EXIT_TERMINATED
    except BrokenPipeError:  # the reader (e.g. `| head`) closed early: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        return _os_error(exc)
    except Exception as exc:  # a bug: say so briefly, the traceback on request
        return _internal_error(exc, args.debug)
    finally:
        sys.unraisablehook = unraisable
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _internal_error(exc: Exception, debug: bool) -> int:
    """A bug, while it is being handled: the traceback with --debug, then one line saying how to report it."""
    if debug:
        traceback.print_exc()
    print(
        f"infersim: internal error: {type(exc).__name__}: {exc}\n"
        f"This is a bug in infersim. Please report it with the command you ran"
        f"{'' if debug else ' (rerun with --debug for the traceback)'}.",
        file=sys.stderr,
    )
    return EXIT_BUG


STDOUT = "standard output"


class _NamedStream:
    """A text stream whose failures to write name it (``OSError.filename``), as a file's do."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream, self._name = stream, name

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self._name) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self._name) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _stdout_named() -> Iterator[None]:
    """Standard output (the process's own, not a caller's replacement) names itself when it fails."""
    if sys.stdout is not sys.__stdout__ or sys.stdout is None:
        yield
        return
    real = sys.stdout
    sys.stdout = _NamedStream(real, STDOUT)
    try:
        yield
    finally:
        sys.stdout = real


def _os_error(exc: OSError) -> int:
    """One line for a failure of the operating system, naming the path (the current folder when
    it is gone and the error names none); the exit status says whether the device failed."""
    from simulator.cli.output import DEVICE_ERRORS

    where = exc.filename
    if where == STDOUT:  # what is still buffered cannot be written: dropped, so that the flush at exit is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    elif where is None and not _cwd_exists():
        where = "the current folder"
    print(f"infersim: error: {f'{where}: ' if where is not None else ''}{exc.strerror or exc}", file=sys.stderr)
    return EXIT_DEVICE if exc.errno in DEVICE_ERRORS else EXIT_BAD_INPUT


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except OSError:
        return False
    return True


def _kept(exc: BaseException) -> str:
    """What an interrupted command leaves: a command that keeps finished runs sets ``exc.kept``."""
    return str(getattr(exc, "kept", "no results folder was written"))


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
