"""Public LLM-serving traces: load, validate, and transform for replay.

Formats (see the shared traces README for their provenance and statistics):

- **Azure LLM inference 2023** CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``; wall-clock
  timestamps become seconds from the first row.
- **Mooncake** JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
  (one id per 512-token prompt block; shared leading ids are shared prefix KV).
- **WEKA agentic coding** JSON sessions: parent ``requests`` with ``in``, ``out``,
  ``think_time`` (client delay after the previous response) and ``hash_ids`` (64-token blocks,
  ids local to the file); ``"subagent"`` entries hold their own requests. A sub-agent is
  spawned before the first parent request at or after its ``t``, and that request waits for
  it (fan-out, then join).

Replay transforms: ``window`` keeps arrivals in ``[start, end)`` seconds and shifts them to
start at 0; ``rate_scale = k`` divides every arrival time by k (k times the recorded rate);
``sample`` keeps each request (or session) with that probability.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import numpy as np

from simulator.config.loading import ConfigError

MOONCAKE_BLOCK_TOKENS = 512
MS_PER_S = 1000.0


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] | None = None
    hash_block_tokens: int = MOONCAKE_BLOCK_TOKENS


@dataclass(frozen=True)
class SessionCall:
    think_s: float  # client delay after the previous call's last token (tool time, the user)
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...]
    subagents: tuple[Session, ...] = ()  # spawned before this call, which waits for them


@dataclass(frozen=True)
class Session:
    id: str
    calls: tuple[SessionCall, ...]
    hash_block_tokens: int


def _positive_int(value: object, where: str, field: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ConfigError(f"{where}: {field}: expected an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{where}: {field}: expected a {'non-negative' if allow_zero else 'positive'} integer")
    return int(value)


def _hashes(value: object, where: str, field: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise ConfigError(f"{where}: {field}: expected a list of integers")
    return tuple(value)


def load_azure(path: Path) -> list[TraceRequest]:
    """Azure 2023 CSV rows as requests, arrival times relative to the first row."""
    rows: list[TraceRequest] = []
    with _open(path) as handle:
        reader = csv.DictReader(handle)
        expected = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        if reader.fieldnames != expected:
            raise ConfigError(f"{path}:1: expected the header {','.join(expected)}, got {reader.fieldnames}")
        start: datetime | None = None
        for line, row in enumerate(reader, start=2):
            where = f"{path}:{line}"
            try:
                stamp = datetime.fromisoformat(row["TIMESTAMP"][:26])
            except (TypeError, ValueError):
                raise ConfigError(f"{where}: TIMESTAMP: expected YYYY-MM-DD HH:MM:SS.ffffff") from None
            start = start or stamp
            tokens_in = _positive_int(_number(row["ContextTokens"], where, "ContextTokens"), where, "ContextTokens")
            tokens_out = _positive_int(_number(row["GeneratedTokens"], where, "GeneratedTokens"), where,
                                       "GeneratedTokens")  # fmt: skip
            rows.append(TraceRequest((stamp - start).total_seconds(), tokens_in, tokens_out))
    return rows


def load_mooncake(path: Path) -> list[TraceRequest]:
    """Mooncake JSONL lines as requests with their 512-token prompt block hashes."""
    rows = []
    with _open(path) as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            where = f"{path}:{line}"
            record = json_object(text, where)
            for key in ("timestamp", "input_length", "output_length", "hash_ids"):
                if key not in record:
                    raise ConfigError(f"{where}: {key}: missing")
            rows.append(TraceRequest(
                _positive_int(record["timestamp"], where, "timestamp", allow_zero=True) / MS_PER_S,
                _positive_int(record["input_length"], where, "input_length"),
                _positive_int(record["output_length"], where, "output_length"),
                _hashes(record["hash_ids"], where, "hash_ids"),
            ))  # fmt: skip
    return rows


def load_weka(path: Path) -> Session:
    """One WEKA agentic-coding session file (parent calls, sub-agents attached to the call they precede)."""
    with _open(path) as handle:
        data = json_object(handle.read(), f"{path}:1")
    return _session(data, str(path), str(data.get("id", path.stem)))


def _session(data: dict[str, object], where: str, session_id: str) -> Session:
    block = _positive_int(data.get("block_size", 64), where, "block_size")
    entries = data.get("requests")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}: requests: expected a non-empty list")
    calls: list[SessionCall] = []
    pending: list[tuple[float, Session]] = []
    for index, entry in enumerate(entries):
        at = f"{where}: requests.{index}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: expected an object")
        if entry.get("type") == "subagent":
            sub = _session({"block_size": block, "requests": entry.get("requests")}, f"{at}", f"{session_id}/{index}")
            pending.append((float(entry.get("t", 0.0)), sub))
            continue
        calls.append(SessionCall(
            think_s=max(0.0, float(entry.get("think_time", 0.0) or 0.0)),
            input_tokens=_positive_int(entry.get("in"), at, "in"),
            output_tokens=max(1, _positive_int(entry.get("out"), at, "out", allow_zero=True)),
            block_hashes=_hashes(entry.get("hash_ids", []), at, "hash_ids"),
            subagents=tuple(sub for _, sub in pending),
        ))  # fmt: skip
        pending = []
    if pending and calls:  # sub-agents after the last parent call join before the session ends
        last = calls[-1]
        calls[-1] = replace(last, subagents=last.subagents + tuple(sub for _, sub in pending))
    return Session(session_id, tuple(calls), block)


def load_weka_dir(path: Path) -> list[Session]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise ConfigError(f"{path}: no *.json session files")
    return [load_weka(f) for f in files]


def window(requests: list[TraceRequest], start_s: float, end_s: float) -> list[TraceRequest]:
    kept = [r for r in requests if start_s <= r.arrival_s < end_s]
    return [replace(r, arrival_s=r.arrival_s - start_s) for r in kept]


def scale_rate(requests: list[TraceRequest], factor: float) -> list[TraceRequest]:
    return [replace(r, arrival_s=r.arrival_s / factor) for r in requests]


def sample(items: list, fraction: float, rng: np.random.Generator) -> list:  # type: ignore[type-arg]
    keep = rng.random(len(items)) < fraction
    return [item for item, k in zip(items, keep, strict=True) if k]


def infinite_cache_reuse(requests: list[TraceRequest]) -> float:
    """Fraction of block references to an already-seen block (the hit rate of an unbounded cache)."""
    seen: set[int] = set()
    hits = total = 0
    for r in requests:
        for h in r.block_hashes or ():
            hits += h in seen
            total += 1
            seen.add(h)
    return hits / total if total else 0.0


def _open(path: Path):  # type: ignore[no-untyped-def]
    try:
        return path.open(newline="")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def json_object(text: str, where: str) -> dict[str, object]:
    """One JSON object from a line or file, or a ConfigError naming ``where``."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    return record


def _number(text: str | None, where: str, field: str) -> float:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {field}: expected a number, got {text!r}") from None
