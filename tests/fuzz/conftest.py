"""The fuzz suite's harness: valid input files to start from, a sandbox per command, the contract.

The contract (issue "Never lose a user's data, and reject every bad input cleanly"):

- bad input exits 2 with ONE message on stderr starting ``infersim: error: `` that names the file
  (and line or field path) and what was expected; no Python traceback; nothing written anywhere
  (a failed command leaves its sandbox byte-identical);
- an unexpected exception is a bug: exit 1 with ``infersim: internal error:``;
- a successful command writes only inside the results folder it was asked for.

Commands run in-process through :func:`simulator.cli.main` with the current folder set to a
fresh sandbox, so a stray relative write lands in the sandbox, where :func:`invoke` sees it.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest

from simulator.cli import main
from simulator.config.loading import bundled_dir

TRACEBACK = "Traceback (most recent call last)"
ERROR = "infersim: error: "
INTERNAL = "infersim: internal error"
WARNING = "infersim: warning: "

#: Wall-clock time an in-process command may take before the harness calls it a hang (seconds).
HANG_S = 20.0

REPO = Path(__file__).resolve().parents[2]

#: The bundled H100 and Llama 3.1 8B profiles as they stand: the named cases edit one line of each (a
#: case whose line the bundled file no longer holds is skipped, not failed: see ``bundled_edit``).
H100 = (bundled_dir("hardware_profiles") / "nvidia-h100-sxm.yaml").read_text(encoding="utf-8")
LLAMA_8B = (bundled_dir("model_profiles") / "llama-3.1-8b.yaml").read_text(encoding="utf-8")

# -- valid inputs, each the smallest of its kind (every named bad input is one edit of these) ----------
#: A closed loop of 2 users and 20 requests of 64 + 8 tokens on one H100: ~30 ms to simulate.
SCENARIO = """\
name: tiny
deployment:
  hardware: nvidia-h100-sxm
  model: llama-3.1-8b
  chips: 1
load:
  kind: closed
  users: 2
requests:
  input_tokens: {dist: constant, value: 64}
  output_tokens: {dist: constant, value: 8}
run:
  seed: 1
  max_requests: 20
"""

#: Open-loop Poisson arrivals for 2 s: the run-size limits apply to its rate and duration.
POISSON = """\
name: poisson
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load:
  kind: open
  arrivals: {process: poisson, rate_per_s: 10}
requests:
  input_tokens: {dist: constant, value: 64}
  output_tokens: {dist: constant, value: 8}
run: {seed: 1, duration: 2 s}
"""

#: Lengths drawn from a file of numbers (``lengths.txt``) or a CSV column (``lengths.csv``).
EMPIRICAL = """\
name: empirical
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: closed, users: 2}
requests:
  input_tokens: {dist: empirical, path: lengths.txt}
  output_tokens: {dist: constant, value: 8}
run: {seed: 1, max_requests: 20}
"""
LENGTHS_TXT = "64\n128\n96\n"
LENGTHS_CSV = "prompt,answer\n64,8\n128,16\n"

MOONCAKE = (
    '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}\n'
    '{"timestamp": 500, "input_length": 120, "output_length": 12, "hash_ids": [1, 2]}\n'
    '{"timestamp": 1000, "input_length": 90, "output_length": 8, "hash_ids": [3]}\n'
)
AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
)
WEKA = (
    '{"id": "w1", "block_size": 64, "requests": ['
    '{"t": 0, "type": "n", "in": 100, "out": 10, "hash_ids": [1, 2]}, '
    '{"t": 1, "type": "n", "in": 150, "out": 10, "think_time": 0.5, "hash_ids": [1, 2, 3]}]}\n'
)
TASKGRAPH = (
    '{"id": "g1", "arrival_s": 0.0, "steps": ['
    '{"id": "plan", "input_tokens": 100, "output_tokens": 10, "tool_s": 0.1}, '
    '{"id": "write", "input_tokens": 150, "output_tokens": 10, "after": ["plan"]}]}\n'
)
TRACE_FILES = {"azure": "trace.csv", "mooncake": "trace.jsonl", "weka": "trace.json", "taskgraph": "graphs.jsonl"}
TRACE_TEXT = {"azure": AZURE, "mooncake": MOONCAKE, "weka": WEKA, "taskgraph": TASKGRAPH}


def trace_scenario(kind: str, extra: str = "") -> str:
    """A scenario replaying the trace file of ``kind`` (``extra``: more keys of ``load``)."""
    return (
        f"name: replay\ndeployment: {{hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}}\n"
        f"load: {{kind: trace, format: {kind}, path: {TRACE_FILES[kind]}{extra}}}\nrun: {{seed: 1, max_requests: 20}}\n"
    )


#: A measurement table of two single-stream rows (closed form only, no engine run: fast to validate).
TABLE_HEADER = "id,hardware,chips,model,weights,spec_decoding,input_tokens,output_tokens,concurrency,metric,value\n"
TABLE_ROWS = (
    "X1,nvidia-h100-sxm,1,llama-3.1-8b,bf16,none,512,128,1,per_user_output_tok_s,150\n"
    "X2,nvidia-h100-sxm,1,llama-3.1-8b,bf16,none,512,128,1,ttft_s,0.05\n"
)
TABLE = TABLE_HEADER + TABLE_ROWS

#: A plan over at most 2 replicas with one seed each: ~0.5 s.
PLAN = POISSON + (
    "slo: {targets: [{metric: ttft_s, stat: p99, max: 1 s}]}\nplan: {default_max_replicas: 2, replications: 1}\n"
)

#: A two-run grid over the tiny scenario.
SWEEP = """\
name: grid
scenario: s.yaml
grid:
  load.users: [1, 2]
metrics: [ttft_s.p50, output_tok_s]
"""


def edit(text: str, old: str, new: str) -> str:
    """``text`` with its one occurrence of ``old`` replaced (an edit that matches nothing is a test bug)."""
    count = text.count(old)
    assert count == 1, f"{old!r} occurs {count} times"
    return text.replace(old, new)


#: The key of a case's files when its edit no longer applies to the bundled profile it edits.
BASE_CHANGED = "<base changed>"


def bundled_edit(base: str, path: str, old: str, new: str | bytes) -> dict[str, str | bytes]:
    """``{path: base with old replaced}``, or ``{BASE_CHANGED: why}`` when the bundled ``base`` no longer
    holds ``old`` exactly once (the profiles evolve; such a case is skipped with the reason)."""
    if base.count(old) != 1:
        return {BASE_CHANGED: f"{old!r} occurs {base.count(old)} times in the bundled {Path(path).name}"}
    before, _, after = base.partition(old)
    return {path: before.encode() + new + after.encode() if isinstance(new, bytes) else before + new + after}


def edit_bytes(text: str, old: str, new: bytes) -> bytes:
    """Like :func:`edit`, with raw (e.g. non-UTF-8) bytes in place of ``old``."""
    assert text.count(old) == 1, old
    before, _, after = text.partition(old)
    return before.encode() + new + after.encode()


# -- running a command and seeing what it did -----------------------------------------------------------
class Hang(BaseException):
    """The command ran longer than :data:`HANG_S` (not an Exception: main() must not swallow it)."""


@dataclass(frozen=True, repr=False)
class Outcome:
    """What one command did: exit status, output, and the files it added, changed or removed."""

    argv: tuple[str, ...]
    code: int
    out: str
    err: str
    added: tuple[str, ...]
    changed: tuple[str, ...]
    escaped: str = ""  # an exception that escaped main() (argparse's SystemExit included)

    def __repr__(self) -> str:
        return (
            f"infersim {' '.join(self.argv)} -> exit {self.code}{f' ({self.escaped})' if self.escaped else ''}\n"
            f"stderr: {self.err!r}\nstdout: {self.out[:400]!r}\n"
            f"added: {list(self.added)}\nchanged: {list(self.changed)}"
        )


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every folder (``None``) and file (its bytes) under ``root``, by relative path."""
    tree: dict[str, bytes | None] = {}
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        tree.update({f"{rel / d}/": None for d in dirs})
        for name in files:
            path = Path(folder) / name
            try:
                tree[str(rel / name)] = path.read_bytes()
            except OSError:
                tree[str(rel / name)] = b"<unreadable>"
    return tree


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread after ``seconds``, and every 5 s after that (should a
    handler in the command swallow one, e.g. inside a garbage-collector callback)."""
    armed = [True]

    def expire(signum: int, frame: FrameType | None) -> None:
        if armed[0]:
            raise Hang(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 5.0)
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def invoke(root: Path, *argv: str, timeout_s: float = HANG_S) -> Outcome:
    """Run ``infersim ARGV`` in-process (current folder: ``root``) and diff ``root`` before and after.

    A command still running after ``timeout_s`` raises :class:`Hang` (the test fails).

    Warnings other than infersim's get Python's default treatment, as in the installed command
    (the suite's ``filterwarnings = error`` would turn a numpy RuntimeWarning into a crash).
    """
    before = snapshot(root)
    out, err = io.StringIO(), io.StringIO()
    escaped = ""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("default")
        try:
            with _deadline(timeout_s):
                code = main(list(argv))
        except SystemExit as exc:  # argparse reports usage errors by raising it
            code = exc.code if isinstance(exc.code, int) else 1
            escaped = f"SystemExit({exc.code})"
    after = snapshot(root)
    added = tuple(sorted(set(after) - set(before)))
    changed = tuple(sorted(p for p, data in before.items() if p not in after or after[p] != data))
    return Outcome(tuple(argv), code, out.getvalue(), err.getvalue(), added, changed, escaped)


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    for name, contents in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(contents, bytes):
            path.write_bytes(contents)
        else:
            path.write_text(contents, encoding="utf-8")


@contextlib.contextmanager
def fresh_sandbox(files: Mapping[str, str | bytes] = {}) -> Iterator[Path]:
    """A new temporary folder holding ``files``, the current folder while the block runs.

    For hypothesis tests, whose examples must not share pytest's function-scoped ``tmp_path``.
    """
    previous = Path.cwd()
    root = Path(tempfile.mkdtemp(prefix="infersim-fuzz-"))
    try:
        write_files(root, files)
        os.chdir(root)
        yield root
    finally:
        os.chdir(previous)
        shutil.rmtree(root, ignore_errors=True)


# -- the contract ---------------------------------------------------------------------------------------
def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(ERROR)]


def assert_no_crash(outcome: Outcome) -> None:
    """Never a traceback, never an internal error, never an exception out of main()."""
    assert TRACEBACK not in outcome.err + outcome.out, outcome
    assert INTERNAL not in outcome.err, outcome
    assert outcome.code != 1, outcome


def assert_rejected(outcome: Outcome, *expected: str) -> None:
    """Exit 2 with one ``infersim: error:`` message holding every ``expected`` text; nothing written.

    An expected text starting with ``!`` is one the message must not hold.
    """
    assert_no_crash(outcome)
    assert outcome.code == 2, outcome
    assert not outcome.escaped, outcome
    assert len(error_lines(outcome.err)) == 1 and outcome.err.count(ERROR) == 1, outcome
    leading = outcome.err[: outcome.err.index(ERROR)].splitlines()
    assert all(line.startswith(WARNING) for line in leading if line.strip()), outcome  # only warnings before it
    for text in expected:  # "!text": a text the message must not hold
        if text.startswith("!"):
            assert text[1:] not in outcome.err, f"did not expect {text[1:]!r} in the message\n{outcome!r}"
        else:
            assert text in outcome.err, f"expected {text!r} in the message\n{outcome!r}"
    assert outcome.out == "", outcome
    assert not outcome.added and not outcome.changed, outcome


def assert_writes_only_inside(outcome: Outcome, folder: str) -> None:
    """A successful command adds files only inside ``folder`` and changes none outside it."""
    prefix = folder.rstrip("/") + "/"
    assert all(p.startswith(prefix) or p == prefix for p in outcome.added), outcome
    assert all(p.startswith(prefix) for p in outcome.changed), outcome


# -- fixtures -------------------------------------------------------------------------------------------
@dataclass
class Sandbox:
    """A test's own folder, the current folder while the test runs."""

    root: Path

    def write(self, files: Mapping[str, str | bytes]) -> None:
        write_files(self.root, files)

    def run(self, *argv: str, timeout_s: float = HANG_S) -> Outcome:
        return invoke(self.root, *argv, timeout_s=timeout_s)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    monkeypatch.chdir(tmp_path)
    return Sandbox(tmp_path)


#: What a stray write of a results folder would leave in the repository (the default folders, markers).
_STRAY = ("runs", "results", ".infersim-results.json", ".infersim-results.lock")


def _strays() -> set[str]:
    return {str(p.relative_to(REPO)) for p in REPO.iterdir() if p.name in _STRAY or p.name.startswith(".infersim")}


@pytest.fixture(autouse=True)
def nothing_lands_in_the_repository() -> Iterator[None]:
    """No command writes results beside the package (e.g. a default ``runs/`` resolved against it)."""
    before = _strays()
    yield
    assert _strays() <= before, f"written into the repository: {sorted(_strays() - before)}"


@pytest.fixture(scope="session")
def results_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete results folder of the tiny scenario (copied, then damaged or planted, by each case)."""
    root = tmp_path_factory.mktemp("results")
    (root / "s.yaml").write_text(SCENARIO)
    previous = Path.cwd()
    os.chdir(root)
    try:
        assert invoke(root, "run", "s.yaml", "-o", "res").code == 0
    finally:
        os.chdir(previous)
    return root / "res"
