"""NVIDIA AIPerf (and GenAI-Perf, its predecessor) exports.

Versions: AIPerf 0.1 to 0.11 and later (``aiperf_version``), GenAI-Perf 0.0.x (no version field).

``profile_export_aiperf.json`` / ``profile_export_genai_perf.json``: each metric an object with
``unit`` (``ms``, ``tokens/sec``, ...) and statistics ``avg``, ``std``, ``min``, ``max``,
``count``, ``pNN``. AIPerf's ``inter_token_latency`` is (e2e - ttft) / (n - 1) per request:
vLLM's TPOT (infersim ``tpot_s``). The load is ``input_config.loadgen``: ``concurrency``
(closed loop) or ``request_rate`` (Poisson, AIPerf's default rate mode); a load described as
``phases`` (a list under ``input_config.loadgen`` or ``input_config``) is read from its one
non-warm-up phase; GenAI-Perf states it as ``input_config.perf_analyzer.stimulus``. The mean input
length is ``input_sequence_length``, else ``usage_prompt_tokens`` (the server's count), else
``total_isl / request_count``. An empty ``input.file`` (GenAI-Perf writes ``""`` for synthetic
prompts) names no dataset. A run that replays a
dataset of multi-turn sessions (``input.public_dataset``, ``use_end_to_start_delays``) has
prompts growing turn by turn and delays between them: fixed-length rows cannot reproduce it,
so its summary is refused, and its per-request export replays it instead.

``profile_export.jsonl``: one request a line, ``metadata`` (``request_start_ns``,
``benchmark_phase``: ``warmup`` records are left out) and ``metrics`` (``time_to_first_token``,
``request_latency`` in ms, ``input_sequence_length``, ``output_sequence_length``). The send
times are recorded, so the replay sends each request when the client did (open loop).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from simulator.errors import ConfigError
from simulator.io.importers.common import (
    MS_PER_S,
    NS_PER_S,
    ImportedRun,
    Load,
    PerRequest,
    Stats,
    get,
    num,
    optional,
    whole,
)

FORMAT = "aiperf"
FORMAT_RECORDS = "aiperf-records"
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
_METRICS = {"time_to_first_token": "ttft_s", "inter_token_latency": "tpot_s", "request_latency": "e2e_s",
            "output_token_throughput": "output_tok_s",
            "output_token_throughput_per_user": "per_user_output_tok_s"}  # fmt: skip
_UNIT_TO_SI = {"ms": 1.0 / MS_PER_S, "s": 1.0, "ns": 1.0 / NS_PER_S, "tokens/sec": 1.0, "tokens/sec/user": 1.0}
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
_STAT = {"count": "count", "avg": "mean", "std": "std", "min": "min", "p50": "p50", "p90": "p90", "p95": "p95",
         "p99": "p99", "max": "max"}  # fmt: skip


def detect(data: object) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("time_to_first_token"), dict)
        and ("aiperf_version" in data or "unit" in data["time_to_first_token"])
    )


def detect_records(first: object) -> bool:
    return (
        isinstance(first, dict) and isinstance(first.get("metadata"), dict) and isinstance(first.get("metrics"), dict)
    )


def _metric(data: Mapping[str, object], key: str, where: str) -> Stats:
    unit = get(data, f"{key}.unit", where, "a unit")
    if unit not in _UNIT_TO_SI:
        raise ConfigError(f"{where}: {key}.unit: expected one of {sorted(_UNIT_TO_SI)}, got {unit!r}")
    node = data[key]
    assert isinstance(node, Mapping)
    scale = 1.0 if key == "count" else _UNIT_TO_SI[str(unit)]
    values = {
        name: num(node, k, where, 0.0) * (1.0 if name == "count" else scale) for k, name in _STAT.items() if k in node
    }
    return Stats(values, key)


def _warmup(phase: Mapping[str, object]) -> bool:
    return any("warmup" in str(phase.get(k, "")).lower() for k in ("type", "name", "phase"))


def _load_node(data: Mapping[str, object], where: str) -> tuple[Mapping[str, object], str]:
    """The object stating the load and its path: AIPerf's ``loadgen``, the one non-warm-up entry of its
    ``phases``, or GenAI-Perf's ``perf_analyzer.stimulus``."""
    for path in ("input_config.loadgen.phases", "input_config.phases"):
        phases = optional(data, path)
        if isinstance(phases, list):
            return _measured_phase(phases, path, where)
    for path in ("input_config.loadgen", "input_config.perf_analyzer.stimulus"):
        node = optional(data, path)
        if isinstance(node, Mapping) and ("concurrency" in node or "request_rate" in node):
            return node, path
    return {}, "input_config.loadgen"


def _measured_phase(phases: list[object], path: str, where: str) -> tuple[Mapping[str, object], str]:
    """The one phase of ``phases`` (at ``path``) that is not a warm-up, and its path."""
    measured = [(i, p) for i, p in enumerate(phases) if isinstance(p, Mapping) and not _warmup(p)]
    if len(measured) != 1:
        raise ConfigError(f"{where}: {path}: expected one phase besides warm-up, got {len(measured)}")
    return measured[0][1], f"{path}.{measured[0][0]}"


def _load(data: Mapping[str, object], where: str) -> tuple[Load | None, str]:
    dataset = optional(data, "input_config.input.public_dataset") or optional(data, "input_config.input.file") or None
    if dataset is not None or optional(data, "input_config.input.use_end_to_start_delays"):
        return None, (
            f"{where}: input_config.input: replays the sessions of {dataset!r} (prompts growing turn "
            "by turn, delays between turns), which fixed-length rows cannot reproduce; import the "
            "per-request profile_export.jsonl beside it to replay them"
        )
    node, path = _load_node(data, where)
    concurrency, rate = node.get("concurrency"), node.get("request_rate")
    count = whole(data, "request_count.avg", where, minimum=1)
    if rate is not None and concurrency is None:
        return Load("poisson", requests=count, rate_per_s=num(node, "request_rate", f"{where}: {path}")), ""
    if concurrency is not None and rate is None:
        return Load("closed", concurrency=whole(node, "concurrency", f"{where}: {path}", minimum=1)), ""
    return None, f"{where}: {path}: expected exactly one of concurrency or request_rate"


def _input_tokens_mean(data: Mapping[str, object], where: str) -> float:
    """The mean prompt length: the client's count, else the server's, else the total over the requests."""
    for key in ("input_sequence_length.avg", "usage_prompt_tokens.avg"):
        if optional(data, key) is not None:
            return num(data, key, where, minimum=1.0)
    if optional(data, "total_isl.avg") is not None:
        return num(data, "total_isl.avg", where, minimum=1.0) / whole(data, "request_count.avg", where, minimum=1)
    raise ConfigError(
        f"{where}: input_sequence_length: missing, and neither usage_prompt_tokens nor total_isl "
        "states the prompt lengths"
    )


def read(data: object, where: str) -> list[ImportedRun]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object (an AIPerf profile export)")
    metrics = {m: _metric(data, k, where) for k, m in _METRICS.items() if k in data}
    load, refusal = _load(data, where)
    models = optional(data, "input_config.endpoint.model_names")
    return [
        ImportedRun(
            source=where,
            format=FORMAT,
            model_name=str(models[0]) if isinstance(models, list) and models else None,
            input_tokens_mean=_input_tokens_mean(data, where),
            output_tokens_mean=num(data, "output_sequence_length.avg", where, minimum=1.0),
            metrics=metrics,
            load=load,
            refusal=refusal,
            notes=("warm-up: excluded by AIPerf (warmup_metrics apart)",),
        )
    ]


def _record_row(where: str, record: object) -> tuple[float, int, int, float, float] | None:
    """One request record as (start ns, input tokens, output tokens, TTFT s, latency s); None for a
    warm-up, cancelled or failed request."""
    if not isinstance(record, Mapping):
        raise ConfigError(f"{where}: expected a JSON object (one AIPerf request record)")
    meta = get(record, "metadata", where, "the request's metadata")
    assert isinstance(meta, Mapping)
    if meta.get("benchmark_phase") == "warmup" or meta.get("was_cancelled") or "error" in record:
        return None
    return (
        num(record, "metadata.request_start_ns", where),
        whole(record, "metrics.input_sequence_length.value", where, minimum=1),
        whole(record, "metrics.output_sequence_length.value", where, minimum=1),
        num(record, "metrics.time_to_first_token.value", where, minimum=0.0) / MS_PER_S,
        num(record, "metrics.request_latency.value", where, minimum=0.0) / MS_PER_S,
    )


def _in_send_order(rows: list[tuple[float, int, int, float, float]]) -> PerRequest:
    """The requests of :func:`_record_row` rows sorted by start, arrivals from the first start."""
    rows.sort(key=lambda r: r[0])
    start = np.array([r[0] for r in rows])
    return PerRequest(
        np.array([r[1] for r in rows]),
        np.array([r[2] for r in rows]),
        np.array([r[3] for r in rows]),
        np.array([r[4] for r in rows]),
        arrival_s=(start - start[0]) / NS_PER_S,
    )


def read_records(records: list[tuple[str, object]]) -> list[ImportedRun]:
    """Per-request records (``where`` names each line); warm-up and cancelled records are left out."""
    rows: list[tuple[float, int, int, float, float]] = []
    skipped = 0
    for where, record in records:
        row = _record_row(where, record)
        if row is None:
            skipped += 1
        else:
            rows.append(row)
    source = records[0][0].rsplit(":", 1)[0] if records else "?"
    if not rows:
        raise ConfigError(f"{source}: no profiling record (only warm-up or cancelled ones)")
    per = _in_send_order(rows)
    return [
        ImportedRun(
            source=source,
            format=FORMAT_RECORDS,
            model_name=None,
            input_tokens_mean=float(per.input_tokens.mean()),
            output_tokens_mean=float(per.output_tokens.mean()),
            metrics={},
            load=None,
            refusal=(
                f"{source}: per-request records only: no measurement rows (the profile_export_aiperf.json "
                "beside it holds the run's statistics and load); the replay sends each request at its "
                "recorded start"
            ),
            per_request=per,
            notes=(f"{skipped} warm-up or cancelled records left out",),
        )
    ]
