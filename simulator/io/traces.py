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

import itertools
import warnings
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.distributions import MAX_REQUEST_TOKENS
from simulator.config.files import integer, json_object, number, read_csv, read_text
from simulator.errors import ConfigError, InfersimWarning

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
    return integer(value, where, field, minimum=0 if allow_zero else 1)


def _tokens(value: object, where: str, field: str) -> int:
    """Tokens of one request: 1 to :data:`~simulator.config.distributions.MAX_REQUEST_TOKENS`."""
    return integer(value, where, field, minimum=1, maximum=MAX_REQUEST_TOKENS)


def _hashes(value: object, where: str, field: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise ConfigError(f"{where}: {field}: expected a list of integers")
    return tuple(value)


def in_time_order(rows: list[TraceRequest], path: Path) -> list[TraceRequest]:
    """Requests sorted by arrival; a trace out of order is replayed sorted, with a warning (not late)."""
    late = sum(1 for a, b in itertools.pairwise(rows) if b.arrival_s < a.arrival_s)
    if not rows:
        raise ConfigError(f"{path}: no requests in the trace")
    if late:
        warnings.warn(
            f"{path}: {late} request{'s' if late > 1 else ''} arrive earlier than the row before; "
            "the trace is replayed in time order",
            InfersimWarning,
            stacklevel=2,
        )
        rows = sorted(rows, key=lambda r: r.arrival_s)
    return rows


def load_azure(path: Path) -> list[TraceRequest]:
    """Azure 2023 CSV rows as requests, arrival times relative to the earliest row."""
    header, lines = read_csv(path)
    expected = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    if header != expected:
        raise ConfigError(f"{path}:1: expected the header {','.join(expected)}, got {','.join(header)}")
    stamps: list[tuple[datetime, int, int]] = []
    for line, row in lines:
        where = f"{path}:{line}"
        try:
            stamp = datetime.fromisoformat(row["TIMESTAMP"][:26])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: TIMESTAMP: expected YYYY-MM-DD HH:MM:SS.ffffff") from None
        stamps.append((stamp, _tokens(row["ContextTokens"], where, "ContextTokens"),
                       _tokens(row["GeneratedTokens"], where, "GeneratedTokens")))  # fmt: skip
    start = min((stamp for stamp, _, _ in stamps), default=None)
    rows = [TraceRequest((stamp - start).total_seconds(), i, o) for stamp, i, o in stamps] if start else []
    return in_time_order(rows, path)


def load_mooncake(path: Path) -> list[TraceRequest]:
    """Mooncake JSONL lines as requests with their 512-token prompt block hashes."""
    rows = []
    for line, text in enumerate(read_text(path).splitlines(), start=1):
        if not text.strip():
            continue
        where = f"{path}:{line}"
        record = json_object(text, where)
        for key in ("timestamp", "input_length", "output_length", "hash_ids"):
            if key not in record:
                raise ConfigError(f"{where}: {key}: missing")
        rows.append(TraceRequest(
            _positive_int(record["timestamp"], where, "timestamp", allow_zero=True) / MS_PER_S,
            _tokens(record["input_length"], where, "input_length"),
            _tokens(record["output_length"], where, "output_length"),
            _hashes(record["hash_ids"], where, "hash_ids"),
        ))  # fmt: skip
    return in_time_order(rows, path)


def load_weka(path: Path) -> Session:
    """One WEKA agentic-coding session file (parent calls, sub-agents attached to the call they precede)."""
    data = json_object(read_text(path), str(path))
    return _session(data, str(path), str(data.get("id", path.stem)))


def _session_call(entry: dict[str, Any], at: str, subagents: tuple[Session, ...]) -> SessionCall:
    """One parent call of a session, with the sub-agents that run before it."""
    think = entry.get("think_time")
    return SessionCall(
        think_s=0.0 if think is None else number(think, at, "think_time", minimum=0.0),
        input_tokens=_tokens(entry.get("in"), at, "in"),
        output_tokens=_tokens(entry.get("out"), at, "out"),
        block_hashes=_hashes(entry.get("hash_ids", []), at, "hash_ids"),
        subagents=subagents,
    )


def _join_trailing(calls: list[SessionCall], subagents: list[Session]) -> None:
    """Sub-agents after the last parent call join before the session ends: attach them to it."""
    if subagents and calls:
        last = calls[-1]
        calls[-1] = replace(last, subagents=last.subagents + tuple(subagents))


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
            pending.append((number(entry.get("t", 0.0), at, "t", minimum=0.0), sub))
            continue
        calls.append(_session_call(entry, at, tuple(sub for _, sub in pending)))
        pending = []
    _join_trailing(calls, [sub for _, sub in pending])
    if not calls:
        raise ConfigError(f"{where}: requests: no model call (only sub-agents)")
    return Session(session_id, tuple(calls), block)


def load_weka_dir(path: Path) -> list[Session]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise ConfigError(f"{path}: no *.json session files")
    return [load_weka(f) for f in files]


def window(requests: list[TraceRequest], start_s: float, end_s: float, source: str = "the trace") -> list[TraceRequest]:
    """The requests arriving in ``[start, end)``, shifted to start at 0; an empty window is an error
    (naming ``source``, the trace file)."""
    kept = [r for r in requests if start_s <= r.arrival_s < end_s]
    if not kept:
        span = f"{requests[0].arrival_s:.6g} to {requests[-1].arrival_s:.6g} s" if requests else "nothing"
        raise ConfigError(f"window [{start_s:.6g} s, {end_s:.6g} s) holds no request of {source} (it spans {span})")
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
