"""Mutated valid files: whatever the bytes, a command exits 0 or 2, never crashes, writes only its folder.

Each example takes one small valid input (``tests/fuzz/conftest.py``) and applies ONE mutation:
delete a key, duplicate a line (a duplicate key), replace a value (a random word, a number, NaN,
infinity, a huge or negative number, a list, a mapping, null, a unit string), truncate the file
at a random byte, or insert random bytes (invalid UTF-8 among them). The command runs in-process
in a fresh folder. The properties are the contract of the issue "Never lose a user's data, and
reject every bad input cleanly":

- the exit status is 0 or 2 (never 1, never an exception out of ``main``), and no traceback;
- exit 2 prints exactly one ``infersim: error:`` message, naming the mutated file, and writes nothing;
- exit 0 writes nothing outside the requested results folder.

Known bugs the mutations reach (each a strict-xfail case of ``test_named_bad_inputs.py``, listed in
``notes/fuzz-findings.md``) are tolerated by their message so that these tests keep finding new
ones; remove an entry of :data:`KNOWN_UNNAMED` when its named case passes.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, note, settings
from hypothesis import strategies as st

from simulator.runner import EXIT_NOTHING_MEASURED
from tests.fuzz.conftest import (
    EMPIRICAL,
    ERROR,
    H100,
    LENGTHS_CSV,
    LENGTHS_TXT,
    LLAMA_8B,
    PLAN,
    POISSON,
    SCENARIO,
    SWEEP,
    TABLE,
    TRACE_FILES,
    TRACE_TEXT,
    Outcome,
    assert_writes_only_inside,
    error_lines,
    fresh_sandbox,
    invoke,
    trace_scenario,
)

#: Messages that do not name the input file: known bugs (the named case that tracks each).
KNOWN_UNNAMED: dict[str, str] = {}
#: The same for sweeps, whose errors should name the sweep file (sw.yaml) and its field.
KNOWN_UNNAMED_IN_SWEEPS = KNOWN_UNNAMED


def check_contract(
    outcome: Outcome, names: tuple[str, ...], folder: str, known_unnamed: dict[str, str] = KNOWN_UNNAMED
) -> None:
    """Exit 0 or 2; one error naming one of ``names`` (the mutated file); writes only in ``folder``.
    Or exit 4: a run that measured nothing, its files written in ``folder``, the reason said."""
    assert "Traceback (most recent call last)" not in outcome.err + outcome.out, outcome
    assert outcome.code in (0, 2, EXIT_NOTHING_MEASURED) and not outcome.escaped, outcome
    if outcome.code == EXIT_NOTHING_MEASURED:
        assert ERROR in outcome.err and "arrived" in outcome.err, outcome
        assert_writes_only_inside(outcome, folder)
        return
    if outcome.code == 0:
        assert ERROR not in outcome.err, outcome
        assert_writes_only_inside(outcome, folder)
        return
    assert len(error_lines(outcome.err)) == 1 and outcome.err.count(ERROR) == 1, outcome
    assert outcome.out == "" and not outcome.added and not outcome.changed, outcome
    unnamed = next((bug for text, bug in known_unnamed.items() if text in outcome.err), None)
    assert unnamed is not None or any(name in outcome.err for name in names), f"the message names no file\n{outcome!r}"


# -- what a mutation puts in place of a value -----------------------------------------------------------
NUMBERS = st.one_of(
    st.integers(-5, 100),
    st.sampled_from([0, -1, 2**31, 2**63, 10**30, 10**400]),
    st.floats(-100.0, 100.0),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 1e30, 5e-324, -0.0]),
)  # no values between ~100 and ~1e30: a valid run that large is slow, not wrong
WORDS = st.text(alphabet=st.characters(blacklist_categories=("Nd", "Cs")), max_size=10)  # no digits, so no big numbers
QUANTITIES = st.sampled_from([
    "1e308 s", "-1 s", "0 s", "nan s", "inf s", "1e400 s", "10 ms", "3.35", "80 GB", "inf GB", "1 TB/s", "1e-300 TB/s",
    "700 W", "-700 W", "1e400 FLOP/s", "", " ", "max", "null", "~", "[1", "{a: 1}", "\u00ff", "'", "a: b", "*x",
])  # fmt: skip
VALUES = st.one_of(
    NUMBERS,
    WORDS,
    QUANTITIES,
    st.none(),
    st.booleans(),
    st.lists(st.integers(-2, 5), max_size=3),
    st.dictionaries(WORDS, st.integers(0, 3), max_size=2),
)
JUNK = st.one_of(
    st.binary(min_size=1, max_size=6),
    st.sampled_from([b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x00", b"\xe9", b"\x80", b"\r", b"\t"]),
)

Key = tuple[str | int, ...]


def key_paths(node: Any, prefix: Key = ()) -> list[Key]:
    """Every mapping key and list index under ``node``, as paths from the top."""
    if isinstance(node, dict):
        items: list[tuple[str | int, Any]] = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return []
    return [p for k, v in items for p in [(*prefix, k), *key_paths(v, (*prefix, k))]]


def mutated(data: Any, path: Key, value: Any = None, delete: bool = False) -> Any:
    copied = copy.deepcopy(data)
    parent = copied
    for part in path[:-1]:
        parent = parent[part]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return copied


@st.composite
def byte_mutations(draw: st.DrawFn, raw: bytes) -> tuple[str, bytes]:
    """Truncate at a random byte, or insert random (often not UTF-8) bytes at a random place."""
    if draw(st.booleans()):
        at = draw(st.integers(0, len(raw) - 1))
        return f"truncate at byte {at}", raw[:at]
    at, junk = draw(st.integers(0, len(raw))), draw(JUNK)
    return f"insert {junk!r} at byte {at}", raw[:at] + junk + raw[at:]


@st.composite
def yaml_mutations(draw: st.DrawFn, text: str) -> tuple[str, bytes]:
    """One mutation of a YAML file: a key deleted, a line duplicated, a value replaced, or bytes."""
    data = yaml.safe_load(text)
    kind = draw(st.sampled_from(["delete", "duplicate", "replace", "replace", "bytes"]))
    if kind == "bytes":
        return draw(byte_mutations(text.encode()))
    if kind == "duplicate":
        lines = text.splitlines(keepends=True)
        at = draw(st.sampled_from([i for i, line in enumerate(lines) if ":" in line]))
        return f"duplicate line {at + 1}: {lines[at]!r}", "".join(lines[: at + 1] + lines[at:]).encode()
    path = draw(st.sampled_from(key_paths(data)))
    if kind == "delete":
        return f"delete {path}", yaml.safe_dump(mutated(data, path, delete=True), sort_keys=False).encode()
    value = draw(VALUES)
    return f"set {path} = {value!r}", yaml.safe_dump(mutated(data, path, value), sort_keys=False).encode()


@st.composite
def jsonl_mutations(draw: st.DrawFn, text: str) -> tuple[str, bytes]:
    """One mutation of a JSON-lines file: a field of a line deleted or replaced, a line duplicated
    or moved, or bytes (NaN and Infinity are written as the bare words JSON lacks)."""
    lines = text.splitlines(keepends=True)
    kind = draw(st.sampled_from(["delete", "replace", "replace", "lines", "bytes"]))
    if kind == "bytes":
        return draw(byte_mutations(text.encode()))
    at = draw(st.integers(0, len(lines) - 1))
    if kind == "lines":
        to = draw(st.integers(0, len(lines)))
        moved = [*lines[:to], lines[at], *lines[to:]]
        return f"copy line {at + 1} before line {to + 1}", "".join(moved).encode()
    record = json.loads(lines[at])
    path = draw(st.sampled_from(key_paths(record)))
    changed = mutated(record, path, delete=True) if kind == "delete" else mutated(record, path, draw(VALUES))
    lines[at] = json.dumps(changed) + "\n"
    return f"{kind} {path} on line {at + 1}: {lines[at]!r}", "".join(lines).encode()


#: Cell texts: numbers in every spelling the readers must refuse or accept, and words. Not "max": a
#: saturated row is an engine run of hundreds of users (seconds long, and valid).
CELL_TEXTS = [
    "", " ", "nan", "NaN", "inf", "-inf", "1e400", "-1", "0", "1", "2", "1.5", "1e22", "1e-320", "abc", '"', "a,b",
    "X1", "bf16", "fp3", "none", "ttft_s", "\u00e9",
]  # fmt: skip
CELLS = st.one_of(st.sampled_from(CELL_TEXTS), WORDS)


@st.composite
def csv_mutations(draw: st.DrawFn, text: str) -> tuple[str, bytes]:
    """One mutation of a CSV table: a cell replaced, dropped or added, a row duplicated, or bytes."""
    rows = [line.split(",") for line in text.splitlines()]
    kind = draw(st.sampled_from(["cell", "cell", "cell", "drop", "add", "row", "bytes"]))
    if kind == "bytes":
        return draw(byte_mutations(text.encode()))
    r = draw(st.integers(0, len(rows) - 1))
    if kind == "row":
        rows.insert(draw(st.integers(1, len(rows))), list(rows[r]))
    else:
        c = draw(st.integers(0, len(rows[r]) - 1))
        if kind == "cell":
            rows[r][c] = draw(CELLS)
        elif kind == "drop":
            del rows[r][c]
        else:
            rows[r].insert(c, draw(CELLS))
    changed = "".join(",".join(row) + "\n" for row in rows)
    return f"{kind} at row {r + 1}: {changed!r}", changed.encode()


# -- the premise: every input mutated here (and edited by the named cases) is valid as it stands ---------
VALID_INPUTS = {
    "scenario": ({"s.yaml": SCENARIO}, ("run", "s.yaml", "-o", "out")),
    "poisson-scenario": ({"p.yaml": POISSON}, ("run", "p.yaml", "-o", "out")),
    "plan": ({"p.yaml": PLAN}, ("plan", "p.yaml", "-o", "out")),
    "hardware-profile": ({"hw/nvidia-h100-sxm.yaml": H100}, ("--hardware-dir", "hw", "estimate", "--hardware",
                                                             "nvidia-h100-sxm", "--model", "llama-3.1-8b")),
    "model-profile": ({"md/llama-3.1-8b.yaml": LLAMA_8B}, ("--model-dir", "md", "estimate", "--hardware",
                                                          "nvidia-h100-sxm", "--model", "llama-3.1-8b")),
    "measurement-table": ({"m.csv": TABLE}, ("validate", "m.csv")),
    "empirical-lengths": ({"e.yaml": EMPIRICAL, "lengths.txt": LENGTHS_TXT}, ("run", "e.yaml", "-o", "out")),
    "empirical-column": ({"e.yaml": EMPIRICAL.replace("path: lengths.txt}", "path: lengths.csv, column: prompt}"),
                          "lengths.csv": LENGTHS_CSV}, ("run", "e.yaml", "-o", "out")),
    **{f"{kind}-trace": ({"t.yaml": trace_scenario(kind), TRACE_FILES[kind]: TRACE_TEXT[kind]},
                         ("run", "t.yaml", "-o", "out")) for kind in TRACE_FILES},
    "sweep": ({"sw.yaml": SWEEP, "s.yaml": SCENARIO}, ("sweep", "sw.yaml", "--jobs", "1", "-o", "out")),
}  # fmt: skip


@pytest.mark.parametrize("name", list(VALID_INPUTS))
def test_the_inputs_before_mutation_are_valid(name: str) -> None:
    """Every fuzzed input starts valid: unmutated, its command exits 0 with no warning or error.

    A profile in a user folder with a bundled profile's id shadows it, with a warning saying so:
    the one warning allowed here. When this fails, a schema change made a base input of
    ``conftest.py`` invalid; fix the base first.
    """
    files, argv = VALID_INPUTS[name]
    with fresh_sandbox(files) as root:
        outcome = invoke(root, *argv)
    unexpected = [line for line in outcome.err.splitlines() if "shadows the one in" not in line]
    assert outcome.code == 0 and "infersim:" not in "\n".join(unexpected), outcome
    assert_writes_only_inside(outcome, "out" if "-o" in argv else "-")


# -- the properties -------------------------------------------------------------------------------------
@settings(max_examples=100)
@given(mutation=yaml_mutations(SCENARIO))
def test_a_mutated_scenario_runs_or_is_rejected_cleanly(mutation: tuple[str, bytes]) -> None:
    """``run`` on a mutated scenario: exit 0 or 2, one message naming the scenario, writes only ``-o``."""
    description, data = mutation
    note(description)
    with fresh_sandbox({"s.yaml": data}) as root:
        outcome = invoke(root, "run", "s.yaml", "-o", "out", timeout_s=10.0)
    check_contract(outcome, ("s.yaml",), "out")


@settings(max_examples=60)
@given(mutation=yaml_mutations(H100))
def test_a_mutated_hardware_profile_is_used_or_rejected_cleanly(mutation: tuple[str, bytes]) -> None:
    """``estimate`` with a mutated hardware profile: exit 0 or 2, the message names the profile."""
    description, data = mutation
    note(description)
    with fresh_sandbox({"hw/nvidia-h100-sxm.yaml": data}) as root:
        outcome = invoke(root, "--hardware-dir", "hw", "estimate", "--hardware", "nvidia-h100-sxm",
                         "--model", "llama-3.1-8b", "--json", timeout_s=10.0)  # fmt: skip
    check_contract(outcome, ("nvidia-h100-sxm",), "-")


@settings(max_examples=40)
@given(mutation=yaml_mutations(LLAMA_8B))
def test_a_mutated_model_profile_is_used_or_rejected_cleanly(mutation: tuple[str, bytes]) -> None:
    """``estimate`` with a mutated model profile: exit 0 or 2, the message names the profile."""
    description, data = mutation
    note(description)
    with fresh_sandbox({"md/llama-3.1-8b.yaml": data}) as root:
        outcome = invoke(root, "--model-dir", "md", "estimate", "--hardware", "nvidia-h100-sxm",
                         "--model", "llama-3.1-8b", timeout_s=10.0)  # fmt: skip
    check_contract(outcome, ("llama-3.1-8b",), "-")


@settings(max_examples=60)
@given(mutation=jsonl_mutations(TRACE_TEXT["mooncake"]))
def test_a_mutated_mooncake_trace_is_replayed_or_rejected_cleanly(mutation: tuple[str, bytes]) -> None:
    """``run`` replaying a mutated Mooncake trace: exit 0 or 2 (out of order: a warning), naming the trace."""
    description, data = mutation
    note(description)
    with fresh_sandbox({"t.yaml": trace_scenario("mooncake"), "trace.jsonl": data}) as root:
        outcome = invoke(root, "run", "t.yaml", "-o", "out", timeout_s=10.0)
    check_contract(outcome, ("trace.jsonl",), "out")


@settings(max_examples=60)
@given(mutation=csv_mutations(TABLE))
def test_a_mutated_measurement_table_is_validated_or_rejected_cleanly(mutation: tuple[str, bytes]) -> None:
    """``validate`` on a mutated measurement CSV: exit 0 or 2, the message names the table."""
    description, data = mutation
    note(description)
    with fresh_sandbox({"m.csv": data}) as root:
        outcome = invoke(root, "validate", "m.csv", "--json", timeout_s=10.0)
    check_contract(outcome, ("m.csv",), "-")


@settings(max_examples=30)
@given(mutation=yaml_mutations(SWEEP))
def test_a_mutated_sweep_runs_or_is_rejected_cleanly(mutation: tuple[str, bytes]) -> None:
    """``sweep`` of a mutated spec: exit 0 or 2, naming the sweep file."""
    description, data = mutation
    note(description)
    with fresh_sandbox({"sw.yaml": data, "s.yaml": SCENARIO}) as root:
        outcome = invoke(root, "sweep", "sw.yaml", "--jobs", "1", "-o", "out", timeout_s=20.0)
    check_contract(outcome, ("sw.yaml",), "out", KNOWN_UNNAMED_IN_SWEEPS)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The results folder of the tiny scenario, whose summary.json the next test mutates."""
    with fresh_sandbox({"s.yaml": SCENARIO}) as root:
        assert invoke(root, "run", "s.yaml", "-o", "res").code == 0
        kept = tmp_path_factory.mktemp("run") / "res"
        shutil.copytree(root / "res", kept)
    return kept


@settings(max_examples=15)
@given(data=st.data())
def test_a_mutated_summary_is_reported_or_rejected_cleanly(run_folder: Path, data: st.DataObject) -> None:
    """``report`` on a results folder whose summary.json is mutated: exit 0 or 2 naming the folder."""
    summary = json.loads((run_folder / "summary.json").read_text())
    text = json.dumps(summary, indent=2) + "\n"
    description, mutated_text = data.draw(jsonl_mutations(json.dumps(summary) + "\n") | byte_mutations(text.encode()))
    note(description)
    files = {f"res/{p.name}": p.read_bytes() for p in run_folder.iterdir() if p.is_file()}
    with fresh_sandbox({**files, "res/summary.json": mutated_text}) as root:
        outcome = invoke(root, "report", "res", timeout_s=20.0)
    check_contract(outcome, ("res",), "res")
