"""The recorder in bounded memory: what it stores stays bounded as a run grows, the integrals the
metrics read stay exact, and a streamed run's binned percentiles sit within the documented bin
width of the exact ones (:mod:`simulator.records.series`, :mod:`simulator.results.requests`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.engine.build import build
from simulator.plan.resolve import resolve
from simulator.records.series import LevelMonitor, TokenCounter
from simulator.records.store import REQUEST_COLUMNS, RunRecords
from simulator.results.metrics import summarize
from simulator.results.requests import BIN_RATIO, LATENCIES, PERCENTILES
from simulator.results.summary import RunSummary
from tests.engine.conftest import CATALOG, scenario

POINTS = 256
#: What a series holds at most: 2 P points, plus those of the last unfinished bucket (< P here).
SERIES_BOUND = 3 * POINTS


def _level_path(changes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(0.3, changes)), rng.integers(0, 40, changes).astype(float)


@pytest.mark.parametrize("changes", [2_000, 20_000])
def test_a_compacted_level_keeps_bounded_points_and_exact_window_integrals(changes: int) -> None:
    times, values = _level_path(changes, seed=changes)
    warmup = float(times[changes // 5]) + 0.01
    bounded, full = LevelMonitor(marks=[warmup], points=POINTS), LevelMonitor(points=10 * changes)
    for t, v in zip(times.tolist(), values.tolist(), strict=True):
        bounded.record(t, v)
        full.record(t, v)
    assert bounded.compacted and not full.compacted
    assert len(bounded.times) <= SERIES_BOUND
    end = float(times[-1]) + 1.0
    for window in ((0.0, end), (warmup, end)):
        assert bounded.integral(*window) == pytest.approx(full.integral(*window), rel=1e-12)
    assert bounded.maximum() == full.maximum()
    # elsewhere within one bucket's share at each end of the window
    t0, t1 = float(times[changes // 3]), float(times[changes // 2])
    assert abs(bounded.integral(t0, t1) - full.integral(t0, t1)) <= 2 * bounded.bucket_s * full.maximum()


@pytest.mark.parametrize("spans", [2_000, 20_000])
def test_a_compacted_token_counter_keeps_bounded_points_and_exact_window_counts(spans: int) -> None:
    rng = np.random.default_rng(spans)
    starts = np.cumsum(rng.exponential(0.05, spans))
    tokens = rng.integers(1, 200, spans).astype(float)
    warmup = float(starts[spans // 4]) + 0.001
    bounded, full = TokenCounter(marks=[warmup], points=POINTS), TokenCounter(points=10 * spans)
    for i, (start, n) in enumerate(zip(starts.tolist(), tokens.tolist(), strict=True)):
        for counter in (bounded, full):
            counter.span(start, start + 0.02, n, 3 * n)
            if i % 4 == 0:
                counter.amend(start + 0.01, n / 2)
    assert bounded.compacted and len(bounded.times) <= SERIES_BOUND
    end = float(starts[-1]) + 1.0
    for window in ((0.0, end), (warmup, end)):
        assert bounded.in_window(*window) == pytest.approx(full.in_window(*window), rel=1e-12)


def _records(requests: int, rows_kept: int | None, points: int | None = None, **parts: object) -> RunRecords:
    chat = scenario(
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 30.0}},
        requests={
            "input_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.8},
            "output_tokens": {"dist": "lognormal", "median": 40, "sigma": 0.8},
        },
        run={"seed": 5, "max_requests": requests, "warmup": "2 s"},
        **parts,
    )
    simulation = build(resolve(chat, CATALOG), rows_kept=rows_kept, points=points)
    return simulation.records(simulation.run())


def _stored(records: RunRecords) -> int:
    """Request rows held in memory, and level and token points."""
    rows = records.streamed.buffer if records.streamed is not None else records.requests["id"]
    series = [records.in_system, *records.queue, *records.batch, *records.kv_blocks, *records.tokens]
    return len(rows) // (len(REQUEST_COLUMNS) if records.streamed is not None else 1) + sum(
        len(s.times) for s in series
    )


def test_what_a_run_stores_stays_bounded_as_it_runs_ten_times_longer() -> None:
    short, long = _records(100, rows_kept=50, points=POINTS), _records(1000, rows_kept=50, points=POINTS)
    assert long.request_count == 10 * short.request_count
    assert long.streamed is not None and long.in_system.compacted and long.batch[0].compacted
    bound = 50 + 5 * SERIES_BOUND  # rows kept, plus five series (one replica) at their bound
    assert _stored(short) <= bound and _stored(long) <= bound


def _summary(records: RunRecords) -> RunSummary:
    chat = scenario(slo={"ttft": "0.05 s", "tpot": "0.01 s"})
    return summarize(records, chat.slo)


def test_a_streamed_run_reports_its_rows_and_binned_percentiles_within_the_bin_width() -> None:
    kept, streamed = _records(600, rows_kept=None), _records(600, rows_kept=64)
    assert kept.streamed is None and streamed.streamed is not None
    exact, binned = _summary(kept), _summary(streamed)
    assert binned.requests_completed == exact.requests_completed
    assert binned.goodput_requests_per_s == exact.goodput_requests_per_s
    assert binned.output_tok_s == exact.output_tok_s and binned.preemptions == exact.preemptions
    for name in LATENCIES:
        e, b = getattr(exact, name), getattr(binned, name)
        assert b.count == e.count and b.mean == pytest.approx(e.mean, rel=1e-12)
        for p in PERCENTILES:
            assert abs(getattr(b, f"p{p}") / getattr(e, f"p{p}") - 1) <= math.sqrt(BIN_RATIO) - 1 + 1e-12
    # the summary says which is which
    assert exact.statistics is not None and binned.statistics is not None
    assert set(LATENCIES) <= set(exact.statistics.exact) and not set(LATENCIES) & set(exact.statistics.binned)
    assert set(LATENCIES) <= set(binned.statistics.binned) and not set(LATENCIES) & set(binned.statistics.exact)
    # every row is still there, in the order requests left
    rows = [line.split(",") for line in streamed.to_csv().splitlines()[1:]]
    assert sorted(rows, key=lambda row: int(row[0])) == [line.split(",") for line in kept.to_csv().splitlines()[1:]]


def test_littles_law_holds_on_a_compacted_sample_path() -> None:
    """Integral of N(t) over [0, T] equals the sum of sojourns, with N(t) stored in buckets."""
    rec = _records(600, rows_kept=None, points=POINTS)
    assert rec.in_system.compacted
    r = rec.requests
    served = r["dropped"] == 0
    sojourn = np.clip(r["done_s"][served], None, rec.end_s) - r["arrival_s"][served]
    assert rec.in_system.integral(0.0, rec.end_s) == pytest.approx(sojourn.sum(), rel=1e-9)


def test_the_inter_token_histogram_counts_every_gap_in_its_bin_exactly() -> None:
    """The inter-token histogram holds, per bin of ``ITL_BIN_EDGES_S``, the weight of every gap
    recorded in it (a gap's bin: the last edge at or below it, clipped to the bins), whichever way
    the gaps came: a decode jump's steps (runs of a bin added at once), one iteration's decodes, or
    speculative passes gap by gap. Whole-token weights make every count exact, so it equals
    numpy's weighted histogram of all the gaps to the last bit."""
    from simulator.engine.recorder import Recorder
    from simulator.records.store import ITL_BIN_EDGES_S

    rng = np.random.default_rng(5)
    recorder = Recorder(1)
    gaps: list[float] = []
    weights: list[float] = []
    for _ in range(200):  # jumps: slowly growing steps, a bin crossed now and then; a cut keeps a prefix
        steps = int(rng.integers(1, 300))
        durations = (rng.uniform(1e-3, 0.1) * np.cumprod(np.full(steps, 1.0 + rng.uniform(0.0, 1e-3)))).tolist()
        done, batch = int(rng.integers(1, steps + 1)), float(rng.integers(1, 64))
        recorder.inter_token_steps(durations, done, batch)
        gaps += durations[:done]
        weights += [batch] * done
    edges = ITL_BIN_EDGES_S.tolist()
    # gaps on the edges and out of their range
    odd = [edges[0] / 2, edges[0], edges[1], edges[900], edges[-2], edges[-1], 2 * edges[-1], 0.0]
    recorder.inter_token_steps(odd, len(odd), 3.0)
    gaps += odd
    weights += [3.0] * len(odd)
    for gap in odd + rng.uniform(1e-4, 1.0, 50).tolist():  # iterations
        recorder.inter_token_gaps(gap, 7.0)
        gaps.append(gap)
        weights.append(7.0)
    verify_gaps, verify_weights = rng.uniform(1e-3, 0.05, 40).tolist(), rng.integers(1, 5, 40).astype(float).tolist()
    recorder.inter_token(verify_gaps, verify_weights)  # speculative: a weight per gap
    gaps += verify_gaps
    weights += verify_weights

    counts = recorder.freeze(1.0, 0.0, [], 0, 0.0, None).itl_counts
    index = np.clip(np.searchsorted(ITL_BIN_EDGES_S, gaps, side="right") - 1, 0, ITL_BIN_EDGES_S.size - 2)
    expected = np.zeros(ITL_BIN_EDGES_S.size - 1)
    np.add.at(expected, index, weights)
    assert counts.tolist() == expected.tolist()
    assert counts.sum() == sum(weights)
