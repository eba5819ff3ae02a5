"""``infersim compile``: build the engine's compiled modules (:mod:`simulator.compiled`)."""

from __future__ import annotations

import argparse

from simulator import compiled


def compile_command(args: argparse.Namespace) -> int:
    """Build (with ``--if-stale``, only when the build is not current); print the engine runs use.

    A build that cannot be made (no C compiler, no Python headers, no mypyc) is not an error: the
    engine runs from its sources, only slower, and the line printed says so; or, when an earlier
    build still matches the sources (:func:`simulator.compiled.in_use`), from that build, and the
    line says that instead (a build that no longer matches is never loaded).
    """
    if args.status:
        print(f"engine: {compiled.status()}")
        return 0
    if args.if_stale and compiled.current():
        print(f"engine: compiled (mypyc), up to date in {compiled.BUILD_DIR}")
        return 0
    try:
        compiled.build()
    except (Exception, SystemExit) as error:  # mypyc exits on a type error
        if compiled.in_use():
            engine = f"the earlier build in {compiled.BUILD_DIR} matches the sources: it runs compiled (mypyc)"
        else:
            engine = "it runs as pure Python"
        print(f"engine: not compiled ({type(error).__name__}: {error}); {engine}")
        return 0
    print(f"engine: compiled (mypyc) into {compiled.BUILD_DIR}")
    return 0
