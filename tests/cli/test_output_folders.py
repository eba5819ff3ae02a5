"""Results folders never destroy a user's data; writes are whole; interrupted commands leave nothing.

The rules are those of :mod:`simulator.cli.output`; each test names the one it holds.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.cli.output import MARKER, STAGING_PREFIX, STAGING_SENTINEL, ResultsFolder, subfolder
from simulator.errors import ConfigError
from tests.conftest import interruptible

SCENARIO = """\
name: tiny
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: closed, users: 2}
requests: {input_tokens: {dist: constant, value: 64}, output_tokens: {dist: constant, value: 8}}
run: {seed: 1, max_requests: 10}
"""

#: A run long enough to interrupt (about a minute of simulation on one core).
LONG_SCENARIO = """\
name: long
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: open, arrivals: {process: poisson, rate_per_s: 50}}
requests: {input_tokens: {dist: constant, value: 512}, output_tokens: {dist: constant, value: 256}}
run: {seed: 1, duration: 20000 s}
"""


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file's bytes (and every link's target) under ``folder``, never following a link."""
    tree = {}
    for where, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(where) / name
            if path.is_symlink():
                tree[str(path.relative_to(folder))] = os.readlink(path).encode()
            elif path.is_file():
                tree[str(path.relative_to(folder))] = path.read_bytes()
    return tree


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder holds a user's work and a scenario."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "thesis.tex").write_text("\\chapter{Results}\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "measurements.csv").write_text("a,b\n1,2\n")
    (tmp_path / "s.yaml").write_text(SCENARIO)
    return tmp_path


@pytest.mark.parametrize("target", [".", "", "./", "..", "data/.."])
def test_the_current_folder_and_its_parents_are_never_a_target(
    user_folder: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-o .`` or ``-o ''`` (and anything holding the current folder) is refused; nothing is deleted."""
    before = _snapshot(user_folder)
    assert main(["run", "s.yaml", "-o", target]) == 2
    assert main(["run", "s.yaml", "-o", target, "--overwrite"]) == 2  # not even with --overwrite
    err = capsys.readouterr().err
    assert "refusing to write results into" in err and "Traceback" not in err
    assert _snapshot(user_folder) == before


def test_home_and_root_are_never_a_target(user_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for target in ("/", str(Path.home())):
        assert main(["run", "s.yaml", "-o", target, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "root of the file system" in err and "home folder" in err


def test_a_foreign_folder_is_refused_and_left_untouched(user_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An existing non-empty folder infersim did not write is refused without --overwrite."""
    before = _snapshot(user_folder / "data")
    assert main(["run", "s.yaml", "-o", "data"]) == 2
    err = capsys.readouterr().err
    assert "data: exists and is not an infersim results folder" in err and "--overwrite" in err
    assert _snapshot(user_folder / "data") == before


def test_overwrite_writes_beside_the_users_files(user_folder: Path) -> None:
    """With --overwrite infersim adds its files and replaces only those it writes."""
    assert main(["run", "s.yaml", "-o", "data", "--overwrite"]) == 0
    assert (user_folder / "data" / "measurements.csv").read_text() == "a,b\n1,2\n"
    assert (user_folder / "data" / "summary.json").is_file()
    marker = json.loads((user_folder / "data" / MARKER).read_text())
    assert marker["command"] == "run" and "measurements.csv" not in marker["files"]


def test_a_rerun_replaces_its_own_files_and_keeps_the_users(user_folder: Path) -> None:
    """Files an earlier run of the same command wrote and this one does not are removed; others stay."""
    assert main(["run", "s.yaml", "-o", "out", "--set", "load.users=1,2"]) == 0
    assert (user_folder / "out" / "run-001" / "summary.json").is_file()
    (user_folder / "out" / "my-notes.txt").write_text("keep me")
    assert main(["run", "s.yaml", "-o", "out"]) == 0
    assert not (user_folder / "out" / "run-001").exists() and (user_folder / "out" / "summary.json").is_file()
    assert (user_folder / "out" / "my-notes.txt").read_text() == "keep me"


def test_another_commands_results_are_not_overwritten(user_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "s.yaml", "-o", "out"]) == 0
    assert main(["compare", "s.yaml", "--hardware", "nvidia-h100-sxm", "-o", "out"]) == 2
    assert "holds the results of `infersim run`" in capsys.readouterr().err


def test_a_file_as_target_is_refused(user_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "s.yaml", "-o", "thesis.tex"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert (user_folder / "thesis.tex").read_text() == "\\chapter{Results}\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permissions")
def test_an_unwritable_place_is_refused_before_simulating(
    user_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = user_folder / "locked"
    locked.mkdir(mode=0o500)
    assert main(["run", "s.yaml", "-o", "locked/out"]) == 2
    assert "not writable" in capsys.readouterr().err


def test_folders_and_files_follow_the_umask(user_folder: Path) -> None:
    previous = os.umask(0o022)
    try:
        assert main(["run", "s.yaml", "-o", "out"]) == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE((user_folder / "out").stat().st_mode) == 0o755
    assert stat.S_IMODE((user_folder / "out" / "summary.json").stat().st_mode) == 0o644


def _write_many(folder: str, writer: int) -> None:
    files = {f"part-{i}.txt": f"writer {writer}\n" for i in range(20)}
    ResultsFolder(Path(folder), "run").write(files)


def test_concurrent_writers_take_turns_and_never_mix(tmp_path: Path) -> None:
    """Eight processes write twenty files each into one folder at once: none fails, and the
    folder ends with one writer's complete set (the lock serialises the commits)."""
    folder = tmp_path / "shared"
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_write_many, args=(str(folder), w)) for w in range(8)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=60)
    assert [p.exitcode for p in processes] == [0] * 8
    contents = {(folder / f"part-{i}.txt").read_text() for i in range(20)}
    assert len(contents) == 1
    assert not list(folder.glob(f"{STAGING_PREFIX}*"))


def _dead_pid() -> int:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(dead.stdout)


def test_a_killed_writers_staging_folder_is_cleaned_by_the_next_writer(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    ResultsFolder(folder, "run").write({"a.txt": "1"})
    stale = folder / f"{STAGING_PREFIX}{_dead_pid()}-0123abcd"  # as a writer names and fills it
    stale.mkdir()
    (stale / STAGING_SENTINEL).write_text("infersim\n")
    (stale / "summary.json").write_text('{"partial": ')
    ResultsFolder(folder, "run").write({"a.txt": "2"})
    assert not stale.exists() and (folder / "a.txt").read_text() == "2"


def test_only_infersims_own_staging_folders_are_cleaned(tmp_path: Path) -> None:
    """A folder merely named like a staging folder (another name, no sentinel, a link) is the user's."""
    folder, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    ResultsFolder(folder, "run").write({"a.txt": "1"})
    elsewhere.mkdir()
    (elsewhere / STAGING_SENTINEL).write_text("planted\n")
    pid = _dead_pid()
    users = [f"{STAGING_PREFIX}notes", f"{STAGING_PREFIX}{pid}-abcd", f"{STAGING_PREFIX}{pid}-0123abcd"]
    for name in users:
        (folder / name).mkdir()
        (folder / name / "keep.txt").write_text("mine\n")
    (folder / users[0] / STAGING_SENTINEL).write_text("a sentinel, but not a staging name\n")
    (folder / f"{STAGING_PREFIX}{pid}-89abcdef").symlink_to(elsewhere, target_is_directory=True)
    before = _snapshot(tmp_path)
    ResultsFolder(folder, "run").write({"a.txt": "2"})
    after = _snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("out/a.txt") and not k.endswith(MARKER)} == {
        k: v for k, v in before.items() if not k.startswith("out/a.txt") and not k.endswith(MARKER)
    }
    assert (folder / f"{STAGING_PREFIX}{pid}-89abcdef").is_symlink()


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("../victim.txt", "a path through '..'"),
        ("figures/../../victim.txt", "a path through '..'"),
        ("@ROOT@/victim.txt", "an absolute path"),
        ("./a.txt", "not a plain relative file name"),
        (".infersim-results.lock", "infersim's own working files"),
        ("linked/victim.txt", "linked is a symbolic link"),
    ],
)
def test_a_listing_that_reaches_outside_refuses_the_folder(tmp_path: Path, entry: str, expected: str) -> None:
    """The marker's list is read back from disk: one bad entry refuses every writer, before anything is touched."""
    folder = tmp_path / "out"
    ResultsFolder(folder, "run").write({"a.txt": "1"})
    (tmp_path / "victim.txt").write_text("victim\n")
    (folder / "linked").symlink_to(tmp_path, target_is_directory=True)
    marker = json.loads((folder / MARKER).read_text())
    marker["files"].append(entry.replace("@ROOT@", str(tmp_path)))
    (folder / MARKER).write_text(json.dumps(marker))
    before = _snapshot(tmp_path)
    for command, replace in (("run", True), (None, False), ("plan", True)):
        with pytest.raises(ConfigError, match=expected):
            ResultsFolder(folder, command, overwrite=True).write({"b.txt": "2"}, replace=replace, owned=("figures/",))
    assert _snapshot(tmp_path) == before


def test_a_file_below_a_linked_folder_is_never_written(tmp_path: Path) -> None:
    """``figures`` a link to another folder: writing ``figures/01.png`` is refused, the other folder untouched."""
    folder, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    ResultsFolder(folder, "run").write({"a.txt": "1"})
    elsewhere.mkdir()
    (elsewhere / "01.png").write_bytes(b"the user's picture")
    (folder / "figures").symlink_to(elsewhere, target_is_directory=True)
    before = _snapshot(tmp_path)
    with pytest.raises(ConfigError, match="figures is a symbolic link"):
        ResultsFolder(folder, None).write({"figures/01.png": b"png"}, replace=False, owned=("figures/",))
    assert _snapshot(tmp_path) == before


def test_report_needs_an_existing_results_folder(user_folder: Path) -> None:
    with pytest.raises(ConfigError, match="no such folder"):
        ResultsFolder(user_folder / "data" / "empty", None)
    (user_folder / "data" / "empty").mkdir()
    with pytest.raises(ConfigError, match="empty folder"):
        ResultsFolder(user_folder / "data" / "empty", None)


def _environ_has(pid: int, mark: str) -> bool:
    try:
        return mark.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def _marked_processes(mark: str) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _environ_has(int(p.name), mark)]


def _start(args: list[str], cwd: Path, mark: str) -> subprocess.Popen[str]:
    env = os.environ | {"INFERSIM_TEST_MARK": mark}
    return subprocess.Popen([sys.executable, "-m", "simulator", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=interruptible)  # fmt: skip


def test_ctrl_c_exits_130_quietly_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "long.yaml").write_text(LONG_SCENARIO)
    process = _start(["run", "long.yaml", "-o", "out", "--allow-large-runs"], tmp_path, "ctrl-c")
    time.sleep(3.0)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert err.strip().splitlines() == ["infersim: interrupted; no results folder was written"]
    assert not (tmp_path / "out").exists()


SWEEP = """\
name: long-sweep
scenario: long.yaml
grid: {load.arrivals.rate_per_s: [40, 50, 60, 70]}
metrics: [ttft_s.p50]
"""


@pytest.mark.parametrize(("how", "code"), [(signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_a_killed_sweep_stops_its_workers(tmp_path: Path, how: signal.Signals, code: int) -> None:
    """SIGTERM stops the pool at once; after SIGKILL each worker notices its parent is gone and exits."""
    (tmp_path / "long.yaml").write_text(LONG_SCENARIO)
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    mark = f"sweep-{how.name}-{os.getpid()}"
    process = _start(["sweep", "sweep.yaml", "-o", "out", "--jobs", "2", "--allow-large-runs"], tmp_path, mark)
    deadline = time.monotonic() + 60
    while len(_marked_processes(mark)) < 3 and time.monotonic() < deadline:  # the parent and two workers
        time.sleep(0.2)
    assert len(_marked_processes(mark)) >= 3
    process.send_signal(how)
    process.communicate(timeout=60)
    assert process.returncode == code
    deadline = time.monotonic() + 10
    while _marked_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _marked_processes(mark) == []


def test_a_listed_file_that_is_a_link_is_replaced_or_removed_as_a_link(tmp_path: Path) -> None:
    """A listed ``summary.json`` planted as a link to a user's file: the link is replaced (a file it
    names is written) or removed (one it no longer writes), never the file it points to."""
    folder = tmp_path / "out"
    ResultsFolder(folder, "run").write({"summary.json": "1", "old.txt": "1"})
    (tmp_path / "victim.txt").write_text("victim\n")
    for name in ("summary.json", "old.txt"):
        (folder / name).unlink()
        (folder / name).symlink_to(tmp_path / "victim.txt")
    ResultsFolder(folder, "run").write({"summary.json": "2"})
    assert (tmp_path / "victim.txt").read_text() == "victim\n"
    assert not (folder / "summary.json").is_symlink() and (folder / "summary.json").read_text() == "2"
    assert not os.path.lexists(folder / "old.txt")


def test_a_linked_sweep_cache_is_refused(tmp_path: Path) -> None:
    """The sweep fills ``cache/`` itself: a results folder whose ``cache`` is a link is refused."""
    folder, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    ResultsFolder(folder, "sweep").write({"runs.csv": "a\n"})
    elsewhere.mkdir()
    (folder / "cache").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ConfigError, match="cache is a symbolic link"):
        ResultsFolder(folder, "sweep")


def test_a_default_folder_inside_a_read_folder_is_never_a_link(tmp_path: Path) -> None:
    """``compare-measured FOLDER`` writes to ``FOLDER/compare`` by default: refused when that is a link."""
    (tmp_path / "received").mkdir()
    (tmp_path / "elsewhere").mkdir()
    assert subfolder(tmp_path / "received", "compare") == tmp_path / "received" / "compare"
    (tmp_path / "received" / "compare").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(ConfigError, match="compare is a symbolic link"):
        subfolder(tmp_path / "received", "compare")
