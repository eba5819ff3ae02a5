"""The one boundary every input file crosses: bytes to text to YAML, JSON or CSV, strictly.

Rules, the same for every file infersim reads (profiles, scenarios, workloads, sweeps,
measurement tables, traces, task graphs, length files, results folders):

- Text is UTF-8 (a leading byte-order mark is allowed); a byte that is not names the file
  and its offset.
- YAML is PyYAML's safe subset with **duplicate keys rejected** (YAML 1.2 forbids them;
  PyYAML silently keeps the last), so a second ``bandwidth:`` cannot overrule the first.
- JSON is strict: no ``NaN`` / ``Infinity`` literals (they are not JSON) unless a reader
  says a format is known to carry them, no duplicate keys, no number that overflows.
- CSV rows must have as many cells as the header.
- Numbers read from a cell or field are finite; bounds are checked where the reader asks.

Every failure is a :class:`~simulator.errors.ConfigError` whose message starts with the file
(and line, where there is one) and names the field.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from simulator.errors import ConfigError

if TYPE_CHECKING:
    from _csv import Reader as CsvReader

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _describe_os_error(path: Path, exc: OSError) -> str:
    if isinstance(exc, IsADirectoryError):
        return f"{path}: is a folder, not a file"
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(exc, PermissionError):
        return f"{path}: cannot read: permission denied"
    return f"{path}: cannot read: {exc.strerror or exc}"


def read_bytes(path: Path) -> bytes:
    try:
        if path.is_dir():
            raise IsADirectoryError
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(_describe_os_error(path, exc)) from None


def decode_utf8(data: bytes, source: str) -> str:
    """UTF-8 text (a BOM is dropped); a bad byte names its offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{source}: byte {exc.start}: not UTF-8 text (found byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None


def read_text(path: Path) -> str:
    return decode_utf8(read_bytes(path), str(path))


# -- YAML ---------------------------------------------------------------------------------------
class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]
    """Safe YAML that refuses a key given twice in one mapping; PyYAML's own parser, whose error
    messages name what it expected and what it found."""


#: libyaml's parser (C) where PyYAML was built with it, as PyPI's wheels are; PyYAML's otherwise.
_FAST_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _FastStrictLoader(_FAST_SAFE_LOADER):  # type: ignore[misc]
    """The same rules on libyaml's parser, several times faster: its nodes go through the same
    constructors, so a document reads the same; it words its errors differently, and refuses a few
    documents PyYAML reads (a ``%YAML 1.3`` directive), so a failure is read again by
    :class:`_StrictLoader` to say what is wrong."""


def _mapping_without_duplicates(
    loader: yaml.constructor.SafeConstructor, node: yaml.MappingNode
) -> Iterator[dict[Any, Any]]:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: PyYAML reports it below
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first given on line {first})", key_node.start_mark
            )
        seen[key] = line
    yield from loader.construct_yaml_map(node)


def _integer(loader: yaml.constructor.SafeConstructor, node: yaml.ScalarNode) -> int:
    """An integer; one longer than Python converts (4,300 digits) is a YAML error at its line."""
    try:
        value: int = loader.construct_yaml_int(node)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {len(node.value):,} digits is too long to be a number", node.start_mark
        ) from None
    return value


for _loader in (_StrictLoader, _FastStrictLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
    _loader.add_constructor("tag:yaml.org,2002:int", _integer)


def parse_yaml(text: str, source: str) -> object:
    try:
        return yaml.load(text, Loader=_FastStrictLoader)
    except yaml.YAMLError:
        pass  # read again by PyYAML's parser, for its message (or its reading)
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None


def read_yaml(path: Path) -> object:
    return parse_yaml(read_text(path), str(path))


# -- JSON ---------------------------------------------------------------------------------------
_BARE_CONSTANT = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*-?(?:NaN|Infinity)\b')


def _constant_at(text: str, source: str) -> str:
    """``file:line: key: `` of the first key holding a bare NaN or Infinity (``file: `` when none is found)."""
    found = _BARE_CONSTANT.search(text)
    if found is None:
        return f"{source}: "
    line = text.count("\n", 0, found.start()) + 1
    return f"{source}:{line}: {found[1]}: "


def parse_json(text: str, source: str, allow_nonfinite: bool = False) -> Any:
    """Strict JSON; ``allow_nonfinite`` admits ``NaN`` / ``Infinity`` for formats known to write them."""

    def constant(name: str) -> float:
        if allow_nonfinite:
            return float(name)
        raise ConfigError(f"{_constant_at(text, source)}{name} is not a JSON number (JSON has no NaN or Infinity)")

    def finite_float(text: str) -> float:
        value = float(text)
        if math.isinf(value) and not allow_nonfinite:
            raise ConfigError(f"{source}: the number {text} overflows a double")
        return value

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ConfigError(f"{source}: duplicate key {key!r} in one JSON object")
            out[key] = value
        return out

    try:
        return json.loads(text, parse_constant=constant, parse_float=finite_float, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        where = f"{source}:{exc.lineno}" if "\n" in text.strip() else source  # a JSONL line names itself
        raise ConfigError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid JSON: nested too deeply") from None
    except ConfigError:
        raise
    except ValueError:  # an integer longer than Python converts (4,300 digits)
        raise ConfigError(f"{source}: an integer too long to be a number (over 4,300 digits)") from None


def read_json(path: Path, allow_nonfinite: bool = False) -> Any:
    return parse_json(read_text(path), str(path), allow_nonfinite)


def json_object(text: str, source: str) -> dict[str, Any]:
    """One JSON object from a line or a file, or a ConfigError naming ``source``."""
    record = parse_json(text, source)
    if not isinstance(record, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(record).__name__}")
    return record


# -- CSV ----------------------------------------------------------------------------------------
def read_csv(path: Path, required: tuple[str, ...] = ()) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and ``(line number, row)`` pairs of a CSV file; short or long rows are errors."""
    text = read_text(path)
    reader = csv.reader(text.splitlines(keepends=True), strict=True)
    try:
        header = _csv_header(reader, path, required)
        rows = _csv_rows(reader, header, path)
    except csv.Error as exc:
        raise ConfigError(f"{path}:{reader.line_num}: not valid CSV: {exc}") from None
    return header, rows


def _csv_header(reader: CsvReader, path: Path, required: tuple[str, ...]) -> list[str]:
    """The header's column names, stripped; it must name every ``required`` column."""
    header = next(reader, None)
    if header is None:
        raise ConfigError(f"{path}: empty file (expected a header line)")
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise ConfigError(f"{path}:1: missing columns {missing}; the header must name {list(required)}")
    return header


def _csv_rows(reader: CsvReader, header: list[str], path: Path) -> list[tuple[int, dict[str, str]]]:
    """``(line number, row)`` of every line that is not blank; each must have the header's cell count."""
    rows = []
    for cells in reader:
        if not cells or not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise ConfigError(
                f"{path}:{reader.line_num}: expected {len(header)} cells (as the header), got {len(cells)}"
            )
        rows.append((reader.line_num, dict(zip(header, cells, strict=True))))
    return rows


# -- numbers ------------------------------------------------------------------------------------
def number(
    value: object, where: str, field: str, minimum: float | None = None, positive: bool = False,
    maximum: float | None = None,
) -> float:  # fmt: skip
    """A finite number from a cell or field (text or JSON number), from ``minimum`` (or > 0) to ``maximum``."""
    result = _finite(value, where, field)
    if positive and result <= 0:
        raise ConfigError(f"{where}: {field}: expected a positive number, got {value!r}")
    if minimum is not None and result < minimum:
        raise ConfigError(f"{where}: {field}: expected a number >= {minimum:g}, got {value!r}")
    if maximum is not None and result > maximum:
        raise ConfigError(f"{where}: {field}: expected a number <= {maximum:g}, got {value!r}")
    return result


def _finite(value: object, where: str, field: str) -> float:
    """``value`` (text, int or float; not a bool) as a finite float; missing or not a number is an error."""
    if value is None or value == "":
        raise ConfigError(f"{where}: {field}: missing (expected a number)")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where}: {field}: expected a number, got {value!r}")
    try:
        result = float(value)
    except (ValueError, OverflowError):
        raise ConfigError(f"{where}: {field}: expected a number, got {value!r}") from None
    if not math.isfinite(result):
        raise ConfigError(f"{where}: {field}: expected a finite number, got {value!r}")
    return result


def integer(value: object, where: str, field: str, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number >= ``minimum`` and <= ``maximum`` (``3.0`` is accepted as 3)."""
    result = number(value, where, field)
    if result != int(result):
        raise ConfigError(f"{where}: {field}: expected an integer, got {value!r}")
    if result < minimum:
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
        raise ConfigError(f"{where}: {field}: expected {kind}, got {value!r}")
    if maximum is not None and result > maximum:
        raise ConfigError(f"{where}: {field}: expected at most {maximum:,}, got {value!r}")
    return int(result)
