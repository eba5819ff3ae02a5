"""Results folders: written whole, never at the cost of a user's files.

Rules (each one a test in ``tests/cli/test_output_folders.py``):

- **Recognised by a marker.** Every folder infersim writes holds ``.infersim-results.json``:
  the command that wrote it, the version, and the list of files it wrote.
- **A listing read back is checked, never trusted.** A results folder may come from someone
  else, so every entry of its marker's list is checked before anything is touched: a plain
  relative name (not absolute, no ``..``, not one of infersim's working files), every folder on
  its way a real folder inside the results folder (not a symbolic link), and not itself a folder.
  One bad entry refuses the whole command (exit 2, naming the folder, the marker and the entry);
  so does a symbolic link among the folders of a file about to be written (a ``figures`` linked
  to another folder). Files are then moved and removed through descriptors opened without
  following symbolic links (``openat``-style), so a link planted while the command runs makes it
  fail, never reach outside. The lock file is opened without following a link either.
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
- **Leftovers cleaned, and only they.** A staging folder whose process no longer runs (killed
  mid-write) is removed by the next writer into that folder; a staging folder is one named
  exactly as this code names them (``.infersim-staging-<pid>-<8 hex digits>``), a real folder (not
  a link) that holds the sentinel file written first into each. A user's folder merely named like
  one is left alone.
- Folders and files get the permissions the user's umask gives, like any other program's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from simulator.errors import ConfigError
from simulator.results.marker import MARKER, REPORT
from simulator.results.marker import marker_data as read_marker
from simulator.version import __version__

LOCK = ".infersim-results.lock"
STAGING_PREFIX = ".infersim-staging-"
#: The name of every staging folder: the prefix, the writer's process id, a dash and 8 hex digits.
STAGING_NAME = re.compile(re.escape(STAGING_PREFIX) + r"([0-9]{1,10})-[0-9a-f]{8}")
#: The file written first into every staging folder: what proves a leftover one is infersim's.
STAGING_SENTINEL = f"{STAGING_PREFIX}sentinel"
#: Sub-folders a command fills itself, outside :meth:`ResultsFolder.write` (the sweep's run cache).
FILLED_SUBFOLDERS = ("cache",)
#: A device that cannot store what is written (full, over quota, failing): not bad input.
DEVICE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
FileContents = str | bytes | Iterable[str]  # text, bytes, or text in pieces (written as they come)


def _internal(name: str) -> bool:
    """One of infersim's working files in a results folder: the marker, the lock, a staging folder."""
    return name in (MARKER, LOCK) or STAGING_NAME.fullmatch(name) is not None


def _reserved(name: str) -> bool:
    """A name no result may take (the working files', and any beginning like a staging folder's)."""
    return name in (MARKER, LOCK) or name.startswith(STAGING_PREFIX)


def _current_folder() -> Path:
    try:
        return Path.cwd().resolve()
    except OSError as exc:
        raise ConfigError(
            f"the current folder: {exc.strerror} (was it deleted?); change to an existing folder"
        ) from None


def _forbidden_reason(target: Path) -> str:
    """Why ``target`` can never hold results ('' when it can)."""
    resolved = Path(os.path.realpath(target.expanduser()))  # (a loop of links is refused by check)
    cwd = _current_folder()
    if resolved == Path(resolved.anchor):
        return "it is the root of the file system"
    if resolved == Path.home().resolve():
        return "it is your home folder"
    if resolved == cwd:
        return "it is the current folder"
    if resolved in cwd.parents:
        return "it holds the current folder"
    return ""


def _check_reachable(path: Path) -> None:
    """Refuse a path the system cannot look up (a name too long, a loop of links, a file on its way)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise ConfigError(
                f"{path}: a symbolic link to {os.readlink(path)!r}, which does not exist; name a real folder"
            ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None


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
        _check_reachable(path)
        if self.command is None and not path.is_dir():
            _refuse_missing(path)
        _refuse_forbidden(path)
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{path}: is a file, not a folder; results need a folder of their own")
        if path.is_dir():
            self._check_existing(path)
        _probe(path, _nearest_existing(path))

    def _check_existing(self, path: Path) -> None:
        """Refuse a folder whose marker lists a file outside it, whose sub-folders are links, or (unless
        --overwrite) that holds files and is not this command's results; one with no results to add to."""
        entries = _entries(path)
        marker = read_marker(path)
        self._listed(marker or {})  # a listing that reaches outside refuses every command, before any work
        for name in FILLED_SUBFOLDERS:
            _refuse_unsafe(path, name, folder=True)
        if self.command is None:
            if marker is None and not entries:
                raise ConfigError(f"{path}: empty folder: no infersim results here")
            return
        if self.overwrite or not entries:
            return
        self._refuse_not_ours(path, marker, entries)

    def _refuse_not_ours(self, path: Path, marker: Mapping[str, object] | None, entries: list[str]) -> None:
        """Refuse a folder holding ``entries`` that is no results folder, or another command's."""
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

    def _listed(self, marker: Mapping[str, object]) -> set[str]:
        """The files the marker says infersim wrote, each checked to lie in the folder (ConfigError if not).

        The marker is read back from disk and may come from anyone: an entry is used only when it
        is a plain relative name whose folders are real folders inside this one.
        """
        listed = marker.get("files", [])
        if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
            raise ConfigError(
                f"{self.path / MARKER}: 'files': expected a list of file names; refusing to touch anything in "
                f"{self.path}: remove the marker or choose another folder"
            )
        real_folders: set[str] = set()  # (each folder looked at once: a run-by-run folder lists thousands)
        for name in listed:
            reason = _name_reason(name) or _unsafe_reason(self.path, name, leaf=False, real_folders=real_folders)
            if reason:
                raise ConfigError(
                    f"{self.path / MARKER}: lists {name!r}: {reason}; refusing to touch anything in {self.path} "
                    "(a results folder from elsewhere?): remove that entry or the marker, or choose another folder"
                )
        return set(listed)

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
        try:  # before the lock file: a refusal leaves the folder as it was
            self._preflight(files, replace, owned, set(kept))
        except ConfigError:
            if not os.path.lexists(self.path / LOCK):
                raise
            # another writer may have committed between this check's reads of its marker and of its
            # files (its files then look like a user's): decided again below, under the lock
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot create the folder: {exc.strerror}") from None
        with self._locked():
            self.check()  # another writer may have changed the folder while this one ran
            marker, earlier, stale = self._preflight(files, replace, owned, set(kept))
            _clean_stale_staging(self.path)
            staging = self.path / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
            try:
                staging.mkdir()
                (staging / STAGING_SENTINEL).write_text(f"infersim, process {os.getpid()}\n", encoding="utf-8")
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
                    self._commit(staging, files, marker, earlier, stale)
            except OSError as exc:
                if exc.errno in DEVICE_ERRORS:  # the boundary says so (its own exit status), naming the folder
                    raise OSError(exc.errno, exc.strerror, str(self.path)) from None
                raise ConfigError(f"{self.path}: cannot write results: {exc.strerror or exc}") from None
            finally:
                shutil.rmtree(staging, ignore_errors=True)

    def _preflight(
        self, files: Mapping[str, FileContents], replace: bool, owned: tuple[str, ...], kept: set[str]
    ) -> tuple[Mapping[str, object], set[str], set[str]]:
        """The marker, its checked listing and the files of it to remove (see :meth:`write`); refuse a
        file to write or remove below a link or where a folder is, or one to write that infersim did
        not write (not in the marker): it is the user's."""
        marker = read_marker(self.path) or {}
        earlier = self._listed(marker)
        same_command = marker.get("command") == self.command
        stale = {n for n in earlier - set(files) - kept if (replace and same_command) or n.startswith(owned)}
        for name in [*files, *sorted(stale)]:
            _refuse_unsafe(self.path, name)
        _refuse_theirs(self.path, files, earlier)
        return marker, earlier, stale

    def _commit(
        self,
        staging: Path,
        files: Mapping[str, FileContents],
        marker: Mapping[str, object],
        earlier: set[str],
        stale: set[str],
    ) -> None:
        """Mark first (so that a concurrent check sees infersim's folder), move, prune, mark again.

        Every move and removal goes through descriptors of the folders on the way, each opened
        without following a symbolic link: a link there makes the commit fail, never reach outside.
        """
        command = self.command if self.command is not None else str(marker.get("command", REPORT))
        self._mark(staging, command, earlier | set(files))
        root = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in files:
                *folders, leaf = PurePosixPath(name).parts
                with _folder(root, folders, create=True) as parent:
                    os.replace(staging / name, leaf, dst_dir_fd=parent)
            for name in sorted(stale):
                _remove_with_empty_parents(root, name)
        finally:
            os.close(root)
        self._mark(staging, command, (earlier - stale) | set(files))

    def _mark(self, staging: Path, command: str, files: set[str]) -> None:
        record = {"tool": "infersim", "command": command, "version": __version__, "files": sorted(files)}
        (staging / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(staging / MARKER, self.path / MARKER)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:  # never through a link: O_CREAT would make its target, wherever it points
            handle = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise ConfigError(f"{self.path / LOCK}: cannot lock the folder: {why}") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)  # releases the lock


def _refuse_missing(path: Path) -> None:
    """Refuse adding to ``path`` that is no folder: a file, or nothing."""
    found = "a file" if os.path.lexists(path) else "no such folder"
    raise ConfigError(f"{path}: {found} (expected a results folder)")


def _refuse_forbidden(path: Path) -> None:
    """Refuse a folder results must never go into (:func:`_forbidden_reason`)."""
    reason = _forbidden_reason(path)
    if reason:
        raise ConfigError(
            f"refusing to write results into {str(path) or '.'!r}: {reason}; name a folder of its own, "
            f"e.g. -o runs/my-run"
        )


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (the working folder if none does)."""
    return next((p for p in [path, *path.parents] if p.exists()), Path("."))


def _entries(path: Path) -> list[str]:
    """The names in the folder, less infersim's own working files."""
    try:
        return [p.name for p in path.iterdir() if not _internal(p.name)]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the folder: {exc.strerror}") from None


def _refuse_theirs(path: Path, files: Mapping[str, FileContents], earlier: set[str]) -> None:
    """Refuse to replace a file in the folder that infersim did not write (not in the marker's listing)."""
    theirs = sorted(n for n in files if n not in earlier and os.path.lexists(path / n))
    if theirs:
        raise ConfigError(
            f"{path}: refusing to replace {len(theirs)} file{'s' if len(theirs) != 1 else ''} infersim did "
            f"not write ({', '.join(theirs[:3])}{', ...' if len(theirs) > 3 else ''}); --overwrite replaces only "
            "infersim's own files: move them or choose another folder"
        )


def subfolder(folder: Path, name: str) -> Path:
    """``folder/name``, the default results folder inside a folder a command reads (which may come
    from anyone): refused (ConfigError) when it is a symbolic link, so results never land elsewhere."""
    _refuse_unsafe(folder, name, folder=True)
    return folder / name


def _probe(path: Path, ancestor: Path) -> None:
    """Refuse ``path`` unless a folder can really be made in ``ancestor`` (made and removed at once).

    ``os.access`` alone passes where ``mkdir`` fails: for root, pseudo file systems (``/proc``)
    and read-only mounts; the probe finds it before any work.
    """
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"{path}: cannot write there: {ancestor} is not writable")
    try:
        # named as this writer's staging (STAGING_NAME: a concurrent writer's check counts it among the
        # working files, not as a user's item), with no sentinel inside, so no writer's clean-up removes it
        probe = ancestor / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write there: {ancestor}: {exc.strerror or exc}") from None


def _check_relative(name: str) -> None:
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts or _reserved(parts[0]):
        raise ValueError(f"not a file name inside a results folder: {name!r}")


def _name_reason(name: str) -> str:
    """Why ``name`` (read back from a marker) is no file name inside a results folder ('' when it is)."""
    if not name or "\0" in name:
        return "not a file name"
    if name.startswith("/"):
        return "an absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "a path through '..'"
    if "" in parts or "." in parts:
        return "not a plain relative file name"
    if _reserved(parts[0]):
        return "one of infersim's own working files"
    return ""


def _unsafe_reason(
    root: Path, name: str, folder: bool = False, leaf: bool = True, real_folders: set[str] | None = None
) -> str:
    """Why the file ``root/name`` (the sub-folder, with ``folder``) cannot be written or removed in
    place ('' when it can): a symbolic link or a file among the folders on its way, or (unless not
    ``leaf``) a folder where the file is. ``real_folders``: folders already found real (added to)."""
    parts = name.split("/")  # (a name checked by _name_reason or _check_relative)
    for depth in _depths(len(parts), folder, leaf):
        shown = "/".join(parts[:depth])
        if real_folders is not None and shown in real_folders and depth < len(parts):
            continue
        path = os.path.join(root, shown)
        mode, reason = _lstat_mode(path)
        if mode is None:
            return reason
        if depth == len(parts) and not folder:
            return _leaf_reason(shown, mode)
        reason = _not_real_folder_reason(path, shown, mode)
        if reason:
            return reason
        if real_folders is not None:
            real_folders.add(shown)
    return ""


def _depths(count: int, folder: bool, leaf: bool) -> range:
    """The depths of a name of ``count`` parts to look at: the last only for a leaf or a folder."""
    return range(1, count + (1 if leaf or folder else 0))


def _lstat_mode(path: str) -> tuple[int | None, str]:
    """The mode of ``path`` (not following a link); ``None`` with '' when it is missing, or with why
    it cannot be looked at."""
    try:
        return os.lstat(path).st_mode, ""
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path}: {exc.strerror}"


def _leaf_reason(shown: str, mode: int) -> str:
    """Why the file ``shown`` cannot be written: a folder is there ('' when it can)."""
    return f"{shown} is a folder, not a file" if stat.S_ISDIR(mode) else ""


def _not_real_folder_reason(path: str, shown: str, mode: int) -> str:
    """Why ``shown``, on the way to a file, is no real folder: a symbolic link or a file ('' when it is)."""
    if stat.S_ISLNK(mode):
        return f"{shown} is a symbolic link (to {os.readlink(path)!r}), not a folder of its own"
    if not stat.S_ISDIR(mode):
        return f"{shown} is not a folder"
    return ""


def _refuse_unsafe(root: Path, name: str, folder: bool = False) -> None:
    reason = _unsafe_reason(root, name, folder)
    if reason:
        raise ConfigError(
            f"{root}: cannot write {name}{'/' if folder else ''}: {reason}; infersim writes only into real "
            "folders inside the results folder: remove the link or choose another folder"
        )


@contextlib.contextmanager
def _folder(root: int, folders: Sequence[str], create: bool) -> Iterator[int]:
    """A descriptor of the folder ``folders`` below the folder ``root``, each step opened without
    following a symbolic link (a link fails: ELOOP or ENOTDIR); ``create`` makes missing ones."""
    handle = os.dup(root)
    try:
        for name in folders:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=handle)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=handle)
            os.close(handle)
            handle = child
        yield handle
    finally:
        os.close(handle)


def _remove_with_empty_parents(root: int, name: str) -> None:
    """Remove the file ``name`` below the folder ``root``, then its folders that are left empty."""
    *folders, leaf = PurePosixPath(name).parts
    with contextlib.suppress(FileNotFoundError), _folder(root, folders, create=False) as parent:
        os.unlink(leaf, dir_fd=parent)
    for depth in range(len(folders), 0, -1):
        try:
            with _folder(root, folders[: depth - 1], create=False) as parent:
                os.rmdir(folders[depth - 1], dir_fd=parent)  # only when empty, and never a link
        except OSError:
            return


def _clean_stale_staging(folder: Path) -> None:
    """Remove staging folders whose writer no longer runs (a killed command's leftovers): a real
    folder named as :data:`STAGING_NAME` holding the sentinel; nothing else, whatever its name."""
    with os.scandir(folder) as entries:
        leftovers = [entry.path for entry in entries if _stale_staging(entry)]
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)  # (never follows a link inside)


def _stale_staging(entry: os.DirEntry[str]) -> bool:
    match = STAGING_NAME.fullmatch(entry.name)
    if match is None or not entry.is_dir(follow_symlinks=False):
        return False
    pid = int(match[1])
    if pid != os.getpid() and _alive(pid):
        return False
    try:
        return stat.S_ISREG(os.lstat(os.path.join(entry.path, STAGING_SENTINEL)).st_mode)
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
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
