"""The marker of a results folder, read back as its manifest: which command wrote it, and which files.

Every folder infersim writes holds ``.infersim-results.json`` (written by
:mod:`simulator.cli.output`): ``{"tool": "infersim", "command": ..., "version": ..., "files": [...]}``,
the files as paths relative to the folder. Readers take a folder's kind and files from it, never
from the names of the files they find there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simulator.config.files import read_text
from simulator.errors import ConfigError

MARKER = ".infersim-results.json"
#: The command of a run folder inside another command's folder (a run sweep's, a comparison's).
RUN = "run"
#: The command a marker names when the report command wrote the first infersim files of a folder.
REPORT = "report"


@dataclass(frozen=True)
class Manifest:
    """What a results folder holds: the command that wrote it and its files (relative paths)."""

    folder: Path
    command: str
    files: frozenset[str]

    def has(self, name: str) -> bool:
        """``name`` is listed and still a file in the folder."""
        return name in self.files and (self.folder / name).is_file()

    def path(self, name: str) -> Path:
        return self.folder / name

    def sub(self, name: str, command: str) -> Manifest:
        """The manifest of the sub-folder ``name``, whose results are those of ``command``."""
        prefix = f"{name}/"
        inside = frozenset(f[len(prefix) :] for f in self.files if f.startswith(prefix))
        return Manifest(self.folder / name, command, inside)

    def runs(self) -> list[Manifest]:
        """The run folders one level down (each listing its ``summary.json``), in name order."""
        names = sorted({f.split("/")[0] for f in self.files if f.count("/") == 1 and f.endswith("/summary.json")})
        return [self.sub(name, RUN) for name in names if self.has(f"{name}/summary.json")]

    def table(self, stem: str) -> Path | None:
        """The table ``stem`` the folder holds (Parquet or CSV, as
        :func:`simulator.studies.sweep.table_file` wrote it)."""
        return next((self.path(n) for n in (f"{stem}.parquet", f"{stem}.csv") if self.has(n)), None)


def marker_data(folder: Path) -> dict[str, object] | None:
    """The marker of ``folder`` as written, unchecked (None when there is none, it is unreadable, or not infersim's)."""
    path = folder / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(read_text(path))
    except (ConfigError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("tool") == "infersim" else None


def read_marker(folder: Path) -> Manifest | None:
    """The marker of ``folder``, typed (None when there is none, or it is not infersim's).

    Raises
    ------
    ConfigError
        If the marker is infersim's but its command or file list is not what infersim writes.
    """
    data = marker_data(folder)
    if data is None:
        return None
    command, files = data.get("command"), data.get("files", [])
    if not isinstance(command, str) or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ConfigError(f"{folder / MARKER}: expected a command name and a list of file names (a damaged marker)")
    return Manifest(folder, command, frozenset(files))
