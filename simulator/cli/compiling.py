"""``infersim compile``: build the engine's compiled modules (:mod:`simulator.compiled`)."""

from __future__ import annotations

import argparse
import json

from simulator import compiled


def compile_command(args: argparse.Namespace) -> int:
    """:func:`_compile`'s line, or under ``--json`` ``{"engine": ...}``."""
    line = _compile(args)
    if args.json:
        print(json.dumps({"engine": line, "compiled": compiled.in_use()}))
    else:
        print(f"engine: {line}")
    return 0


def _compile(args: argparse.Namespace) -> str:
    """Build (with ``--if-stale``, only when the build is not current); print the engine runs use.

    A build that cannot be made (no C compiler, no Python headers, no mypyc) is not an error: the
    engine runs from its sources, only slower, and the line printed says so; or, when an earlier
    build still matches the sources (:func:`simulator.compiled.in_use`), from that build, and the
    line says that instead (a build that no longer matches is never loaded). Returns that line.
    """
    if args.status:
        return compiled.status()
    if args.if_stale and compiled.current():
        return f"compiled (mypyc), up to date in {compiled.BUILD_DIR}"
    try:
        compiled.build()
    except (Exception, SystemExit) as error:  # mypyc exits on a type error
        if compiled.in_use():
            engine = f"the earlier build in {compiled.BUILD_DIR} matches the sources: it runs compiled (mypyc)"
        else:
            engine = "it runs as pure Python"
        return f"not compiled ({type(error).__name__}: {error}); {engine}"
    return f"compiled (mypyc) into {compiled.BUILD_DIR}"
