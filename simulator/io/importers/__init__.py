"""Import benchmark clients' result files: detect the format, read runs in SI units.

One module per format (each documents the fields it reads, its units and its quirks):
:mod:`~simulator.io.importers.vllm_bench`, :mod:`~simulator.io.importers.sglang_bench`,
:mod:`~simulator.io.importers.inference_perf`, :mod:`~simulator.io.importers.aiperf` (also
GenAI-Perf's export and AIPerf's per-request JSONL) and :mod:`~simulator.io.importers.guidellm`.
The metric-name mapping between the tools is :data:`~simulator.io.importers.common.METRIC_NAMES`.

:func:`read_file` parses a file once (JSON, JSON lines, or YAML for a ``.yaml`` / ``.yml`` file:
GuideLLM's ``benchmarks.yaml``; SGLang's bare ``Infinity`` is admitted), picks the format by the
keys it carries (or checks the one named) and returns its
runs. A file no format recognises, or a damaged one, is a ConfigError naming the file and
the field; so is a run whose figures no server produces (negative, zero or 1000x-off statistics,
TTFT after E2E: :func:`simulator.io.importers.checks.check_plausible`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simulator.config.files import parse_json, parse_yaml, read_text
from simulator.errors import ConfigError
from simulator.io.importers import aiperf, guidellm, inference_perf, sglang_bench, vllm_bench
from simulator.io.importers.common import ImportedRun

#: Single-document formats: name -> (detector, reader).
_DOCUMENTS: dict[str, tuple[Callable[[object], bool], Callable[[object, str], list[ImportedRun]]]] = {
    vllm_bench.FORMAT: (vllm_bench.detect, vllm_bench.read),
    inference_perf.FORMAT: (inference_perf.detect, inference_perf.read),
    aiperf.FORMAT: (aiperf.detect, aiperf.read),
    guidellm.FORMAT: (guidellm.detect, guidellm.read),
}
#: The versions read, as the README's support matrix states them.
SUPPORTED_VERSIONS = (
    "vLLM's result JSON with request_rate and *_ttft_ms (benchmark_serving.py from vLLM 0.5, vllm bench serve "
    "0.8 to 0.11), SGLang's bench_serving JSONL (the late-2024 schema of medians and later ones), an "
    "inference-perf lifecycle report with load_summary and successes (2025), an AIPerf export (0.1 to 0.11 "
    "and later) or GenAI-Perf's (0.0.x), or GuideLLM's benchmarks.json / .yaml (0.3 to 0.8)"
)
#: Every format a user may name (``genai-perf`` reads as AIPerf's export, which continues it).
FORMATS = (*_DOCUMENTS, sglang_bench.FORMAT, aiperf.FORMAT_RECORDS, "genai-perf")


def _lines(text: str, source: str) -> list[tuple[str, object]]:
    return [
        (f"{source}:{n}", parse_json(line, f"{source}:{n}", allow_nonfinite=True))
        for n, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]


def _detected(document: object, lines: list[tuple[str, object]] | None) -> str | None:
    if lines is None:
        if sglang_bench.detect(document):  # one bench_serving run: a JSONL file of one line
            return sglang_bench.FORMAT
        return next((name for name, (detect, _) in _DOCUMENTS.items() if detect(document)), None)
    first = lines[0][1]
    if sglang_bench.detect(first):
        return sglang_bench.FORMAT
    if aiperf.detect_records(first):
        return aiperf.FORMAT_RECORDS
    return None


def _parsed(path: Path, text: str, source: str) -> tuple[object, list[tuple[str, object]] | None]:
    """The file as one document (YAML for GuideLLM's ``.yaml``, else JSON), or, when it is not one, as
    JSON lines (the document's error stands when the lines do not parse either)."""
    try:
        if path.suffix.lower() in (".yaml", ".yml"):  # GuideLLM's benchmarks.yaml
            return parse_yaml(text, source), None
        return parse_json(text, source, allow_nonfinite=True), None
    except ConfigError as whole_error:
        if len(text.strip().splitlines()) < 2:
            raise
        try:
            return None, _lines(text, source)
        except ConfigError:
            raise whole_error from None


def _format(document: object, lines: list[tuple[str, object]] | None, format: str | None, source: str) -> str:
    """The format detected in the file; refused when none is, or it is not the one named."""
    detected = _detected(document, lines)
    wanted = aiperf.FORMAT if format == "genai-perf" else format
    if detected is None:
        kind = "JSON lines" if lines is not None else "a JSON document"
        raise ConfigError(
            f"{source}: {kind} of no known benchmark format or version (expected one of "
            f"{list(FORMATS)}: {SUPPORTED_VERSIONS})"
        )
    if wanted is not None and wanted != detected:
        raise ConfigError(f"{source}: named as {format}, but its fields are those of {detected}")
    return detected


def _runs(detected: str, document: object, lines: list[tuple[str, object]] | None, source: str) -> list[ImportedRun]:
    """The runs of a file of format ``detected``: a line (or the document) per run for SGLang's
    bench_serving, AIPerf's records for JSON lines, else the format's document reader."""
    if detected == sglang_bench.FORMAT:
        return [sglang_bench.read_line(record, where) for where, record in lines or [(f"{source}:1", document)]]
    if lines is not None:
        return aiperf.read_records(lines)
    return _DOCUMENTS[detected][1](document, source)


def read_file(path: Path, format: str | None = None) -> list[ImportedRun]:
    """The runs of one result file, in the named format or the one detected."""
    if format is not None and format not in FORMATS:
        raise ConfigError(f"format: expected one of {list(FORMATS)}, got {format!r}")
    source = str(path)
    text = read_text(path)
    if not text.strip():
        raise ConfigError(f"{source}: empty file (expected a benchmark result)")
    document, lines = _parsed(path, text, source)
    detected = _format(document, lines, format, source)
    runs = _runs(detected, document, lines, source)
    from simulator.io.importers.checks import check_plausible  # its physics needs pydantic: not at parser start-up

    for run in runs:
        check_plausible(run)
    return runs
