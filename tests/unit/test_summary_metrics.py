"""The summary's added statistics obey their definitions (:mod:`simulator.results.metrics`): std,
min, max and p99.9 of every distribution (exact from kept rows, exact moments when streamed),
failed requests, concurrency as the client counts it, peak output tokens per second, and the
schema name a document carries."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from simulator.engine.build import build
from simulator.plan.resolve import resolve
from simulator.records.store import RunRecords
from simulator.results.metrics import summarize
from simulator.results.requests import BIN_RATIO, QUANTILES, LogHistogram, distribution_stats, measured_rows
from simulator.results.summary import SUMMARY_SCHEMA, RunSummary
from simulator.serialize import strict_json
from tests.engine.conftest import CATALOG, scenario


def _values(seed: int, size: int = 5_000) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(-3.0, 0.9, size)


def test_a_distribution_states_numpy_moments_and_ordered_percentiles() -> None:
    values = _values(1)
    stats = distribution_stats(np.append(values, [np.nan, np.inf]))  # non-finite values are left out
    assert stats.count == values.size
    assert stats.std == pytest.approx(float(np.std(values)), rel=1e-12)
    assert (stats.min, stats.max) == (values.min(), values.max())
    ordered = [stats.min, *(getattr(stats, key) for key in QUANTILES), stats.max]
    assert ordered == sorted(ordered)
    assert stats.p99_9 == pytest.approx(float(np.percentile(values, 99.9)), rel=1e-12)


def test_streamed_moments_merged_chunk_by_chunk_equal_the_exact_ones() -> None:
    values = _values(2)
    whole, merged = LogHistogram(), LogHistogram()
    whole.add(values)
    for chunk in np.array_split(values, 7):
        part = LogHistogram()
        part.add(chunk)
        merged.merge(part)
    exact = distribution_stats(values)
    for histogram in (whole, merged):
        stats = histogram.stats("none")
        assert stats.std == pytest.approx(exact.std, rel=1e-9)
        assert (stats.min, stats.max) == (exact.min, exact.max)
        assert abs(stats.p99_9 / exact.p99_9 - 1) <= math.sqrt(BIN_RATIO) - 1 + 1e-12


def _records(requests: int, rate_per_s: float) -> RunRecords:
    chat = scenario(
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate_per_s}},
        requests={"input_tokens": {"dist": "constant", "value": 200},
                  "output_tokens": {"dist": "constant", "value": 60}},
        run={"seed": 3, "max_requests": requests, "warmup": "1 s"},
    )  # fmt: skip
    simulation = build(resolve(chat, CATALOG), rows_kept=None)
    return simulation.records(simulation.run())


@pytest.fixture(scope="module")
def records() -> RunRecords:
    return _records(300, 40.0)


def test_concurrency_is_the_clients_count_of_requests_sent_and_unanswered(records: RunRecords) -> None:
    s = summarize(records, scenario().slo)
    r = records.requests
    served = r["dropped"] == 0
    arrival, done = r["arrival_s"][served], r["done_s"][served]
    assert s.requests_in_flight == 0  # every request answered: the rows hold every interval
    t0, t1 = records.warmup_s, records.end_s
    overlap = np.clip(np.minimum(done, t1) - np.maximum(arrival, t0), 0.0, None)
    assert s.mean_concurrency == pytest.approx(overlap.sum() / (t1 - t0), rel=1e-9)
    # a sweep over half-open [arrival, done): a departure at the instant of an arrival goes first
    events = sorted([(a, 1) for a in arrival] + [(c, -1) for c in done])
    assert s.peak_concurrency == max(np.cumsum([step for _, step in events]))
    assert s.mean_concurrency <= s.peak_concurrency
    assert s.requests_failed == s.requests_dropped + s.requests_rejected_over_budget


def test_the_peak_second_emits_at_least_the_mean_second(records: RunRecords) -> None:
    s = summarize(records, scenario().slo)
    seconds = math.floor(records.end_s - records.warmup_s)
    emitted, _ = records.tokens_in_window(records.warmup_s, records.warmup_s + seconds)
    assert seconds >= 1 and emitted / seconds <= s.peak_output_tok_s <= emitted
    measured = measured_rows(records.requests, records.warmup_s)
    assert s.e2e_s.count == int(measured.sum()) and s.e2e_s.min <= s.e2e_s.p50 <= s.e2e_s.p99_9 <= s.e2e_s.max


def test_a_window_shorter_than_a_second_has_no_peak_second_and_says_why() -> None:
    s = summarize(_records(8, 200.0), scenario().slo)
    assert s.window_s < 1.0 and math.isnan(s.peak_output_tok_s)
    assert s.undefined is not None and "shorter than 1 s" in s.undefined["peak_output_tok_s"]


def test_the_document_names_its_schema_and_a_version_1_document_still_reads(records: RunRecords) -> None:
    document = json.loads(json.dumps(strict_json(summarize(records, scenario().slo).to_dict())))
    assert list(document)[:2] == ["schema", "schema_version"] and document["schema"] == SUMMARY_SCHEMA
    assert RunSummary.model_validate(document).to_dict()["schema"] == SUMMARY_SCHEMA
    old = {k: v for k, v in document.items() if k not in ("schema", "peak_output_tok_s")} | {"schema_version": 1}
    old["ttft_s"] = {k: old["ttft_s"][k] for k in ("count", "mean", "p50", "p90", "p95", "p99")}
    read = RunSummary.model_validate(old)
    assert read.to_dict()["schema"] == "infersim-summary/1" and math.isnan(read.ttft_s.std)
