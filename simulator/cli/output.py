"""Results folders: written whole, never at the cost of a user's files.

Rules (each one a test in ``tests/cli/test_output_folders.py``):

- **Recognised by a marker.** Every folder infersim writes holds ``.infersim-results.json``:
  the command that wrote it, the version, and the list of files it wrote.
- **Never a foreign folder.** ``-o DIR`` into an existing folder that is not empty and not
  infersim's own results of the *same command* is refused (exit 2) unless ``--overwrite``
  is given; even then only the files infersim wrote (listed in the marker) are replaced: a
  user's file with the name of an output is refused, nothing else is touched.
  The current folder, any folder above it, the home folder and ``/`` are never valid targets.
- **Whole or not at all.** Files are written to a staging folder inside the target, then
  moved into place one rename each while an exclusive lock (``flock`` on
  ``.infersim-results.lock``) is held and SIGINT / SIGTERM are deferred, the marker last.
  Concurrent writers into one folder therefore take turns (the last one's files remain, none
  mixed with the other's leftovers), and a command interrupted before its commit leaves the
  folder as it was. Files an earlier run of the same command wrote and this one does not are
  removed; files of any other origin never are.
- **Long commands fill it run by run.** ``run`` with several values, ``compare`` and ``plan``
  write each finished run as it completes, beside ``<command>.partial.json`` (what is done so
  far, the version and seed): an interrupted command keeps what it found, marked partial.
  The last write replaces that file with the full results (the runs written before are kept).
- **Leftovers cleaned.** A staging folder whose process no longer runs (killed mid-write) is
  removed by the next writer into that folder.
- Folders and files get the permissions the user's umask gives, like any other program's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from simulator.config.files import read_text
from simulator.errors import ConfigError
from simulator.version import __version__

MARKER = ".infersim-results.json"
LOCK = ".infersim-results.lock"
STAGING_PREFIX = ".infersim-staging-"
FileContents = str | bytes | Iterable[str]  # text, bytes, or text in pieces (written as they come)


def _internal(name: str) -> bool:
    return name in (MARKER, LOCK) or name.startswith(STAGING_PREFIX)


def read_marker(folder: Path) -> dict[str, object] | None:
    """The marker of an infersim results folder, or None when there is none (or it is unreadable)."""
    path = folder / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(read_text(path))
    except (ConfigError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("tool") == "infersim" else None


def _forbidden_reason(target: Path) -> str:
    """Why ``target`` can never hold results ('' when it can)."""
    resolved = target.expanduser().resolve()
    cwd = Path.cwd().resolve()
    if resolved == Path(resolved.anchor):
        return "it is the root of the file system"
    if resolved == Path.home().resolve():
        return "it is your home folder"
    if resolved == cwd:
        return "it is the current folder"
    if resolved in cwd.parents:
        return "it holds the current folder"
    return ""


class ResultsFolder:
    """A results folder for one command; checked when made, written by :meth:`write`.

    Parameters
    ----------
    path
        Where the results go.
    command
        The command writing them (``run``, ``compare``, ...); ``None`` adds files to a folder
        any command wrote (``report``).
    overwrite
        Write into a folder that is not empty and not this command's own results (only files
        infersim writes are replaced).
    """

    def __init__(self, path: Path, command: str | None, overwrite: bool = False) -> None:
        self.path, self.command, self.overwrite = path, command, overwrite
        self.check()

    def check(self) -> None:
        """Refuse a target that cannot or must not hold these results (ConfigError, before any work)."""
        path = self.path
        if self.command is None and not path.is_dir():
            raise ConfigError(f"{path}: no such folder (expected a results folder)")
        reason = _forbidden_reason(path)
        if reason:
            raise ConfigError(
                f"refusing to write results into {str(path) or '.'!r}: {reason}; name a folder of its own, "
                f"e.g. -o runs/my-run"
            )
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{path}: is a file, not a folder; results need a folder of their own")
        if path.is_dir():
            self._check_existing(path)
        ancestor = next((p for p in [path, *path.parents] if p.exists()), Path("."))
        _probe(path, ancestor)

    def _check_existing(self, path: Path) -> None:
        try:
            entries = [p.name for p in path.iterdir() if not _internal(p.name)]
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the folder: {exc.strerror}") from None
        marker = read_marker(path)
        if self.command is None:
            if marker is None and not entries:
                raise ConfigError(f"{path}: empty folder: no infersim results here")
            return
        if self.overwrite or not entries:
            return
        if marker is None:
            example = ", ".join(sorted(entries)[:3])
            raise ConfigError(
                f"{path}: exists and is not an infersim results folder (it holds {len(entries)} "
                f"item{'s' if len(entries) != 1 else ''}: {example}); infersim never deletes them: choose "
                f"another folder, or add --overwrite to write beside them (only infersim's files are replaced)"
            )
        if marker.get("command") != self.command:
            raise ConfigError(
                f"{path}: holds the results of `infersim {marker.get('command')}`, not `infersim {self.command}`; "
                f"choose another folder, or add --overwrite"
            )

    # -- writing ------------------------------------------------------------------------------
    def write(
        self,
        files: Mapping[str, FileContents],
        replace: bool = True,
        owned: tuple[str, ...] = (),
        kept: tuple[str, ...] = (),
    ) -> None:
        """Write ``files`` (relative path -> text or bytes) into the folder, all or nothing.

        ``replace``: files this command wrote earlier and not now are removed (a rerun),
        except the ``kept`` ones (written earlier by this same command, run by run);
        otherwise the folder keeps them (adding a report to a run folder), except earlier
        infersim files under the ``owned`` prefixes (an older report's figures).
        """
        for name in files:
            _check_relative(name)
        self._check_collisions(files)  # before the lock file: a refusal leaves the folder as it was
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot create the folder: {exc.strerror}") from None
        with self._locked():
            self.check()  # another writer may have changed the folder while this one ran
            self._check_collisions(files)
            _clean_stale_staging(self.path)
            staging = self.path / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
            try:
                staging.mkdir()
                for name, contents in files.items():
                    target = staging / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if isinstance(contents, bytes):
                        target.write_bytes(contents)
                    elif isinstance(contents, str):
                        target.write_text(contents, encoding="utf-8")
                    else:
                        with target.open("w", encoding="utf-8") as file:
                            file.writelines(contents)
                with _signals_deferred():
                    self._commit(staging, files, replace, owned, set(kept))
            except OSError as exc:
                raise ConfigError(f"{self.path}: cannot write results: {exc.strerror or exc}") from None
            finally:
                shutil.rmtree(staging, ignore_errors=True)

    def _check_collisions(self, files: Mapping[str, FileContents]) -> None:
        """Refuse to replace a file infersim did not write (not in the marker): it is the user's."""
        listed = (read_marker(self.path) or {}).get("files")
        earlier = {str(n) for n in listed} if isinstance(listed, list) else set()
        theirs = sorted(n for n in files if n not in earlier and os.path.lexists(self.path / n))
        if theirs:
            raise ConfigError(
                f"{self.path}: refusing to replace {len(theirs)} file{'s' if len(theirs) != 1 else ''} infersim did "
                f"not write ({', '.join(theirs[:3])}{', ...' if len(theirs) > 3 else ''}); --overwrite replaces only "
                "infersim's own files: move them or choose another folder"
            )

    def _commit(
        self, staging: Path, files: Mapping[str, FileContents], replace: bool, owned: tuple[str, ...], kept: set[str]
    ) -> None:
        """Mark first (so that a concurrent check sees infersim's folder), move, prune, mark again."""
        marker = read_marker(self.path) or {}
        listed = marker.get("files")
        earlier = {str(n) for n in listed} if isinstance(listed, list) else set()
        command = self.command if self.command is not None else str(marker.get("command", "report"))
        self._mark(staging, command, earlier | set(files))
        for name in files:
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, self.path / name)
        same_command = marker.get("command") == self.command
        stale = {n for n in earlier - set(files) - kept if (replace and same_command) or n.startswith(owned)}
        for name in sorted(stale):
            _remove_with_empty_parents(self.path, name)
        self._mark(staging, command, (earlier - stale) | set(files))

    def _mark(self, staging: Path, command: str, files: set[str]) -> None:
        record = {"tool": "infersim", "command": command, "version": __version__, "files": sorted(files)}
        (staging / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(staging / MARKER, self.path / MARKER)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            handle = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot lock the folder: {exc.strerror}") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)  # releases the lock


def _probe(path: Path, ancestor: Path) -> None:
    """Refuse ``path`` unless a folder can really be made in ``ancestor`` (made and removed at once).

    ``os.access`` alone passes where ``mkdir`` fails: for root, pseudo file systems (``/proc``)
    and read-only mounts; the probe finds it before any work.
    """
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"{path}: cannot write there: {ancestor} is not writable")
    try:
        # named as this writer's staging, so a concurrent writer's clean-up leaves it alone
        os.rmdir(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=ancestor))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write there: {ancestor}: {exc.strerror or exc}") from None


def _check_relative(name: str) -> None:
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts or _internal(parts[0]):
        raise ValueError(f"not a file name inside a results folder: {name!r}")


def _remove_with_empty_parents(root: Path, name: str) -> None:
    path = root / name
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    for parent in path.parents:
        if parent == root:
            break
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when empty


def _clean_stale_staging(folder: Path) -> None:
    """Remove staging folders whose writer no longer runs (a killed command's leftovers)."""
    for entry in folder.glob(f"{STAGING_PREFIX}*"):
        pid_text = entry.name[len(STAGING_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or not _alive(int(pid_text)) or int(pid_text) == os.getpid():
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the renames are done (delivered right after)."""
    deferred = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
