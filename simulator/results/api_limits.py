"""What a rate-limited API backend saw over the run: accepted requests, 429s, retries, failures,
spills, and the busiest trailing minute.

The busiest minute: for each accepted request ``i`` (send time ``t_i``), the requests and tokens
accepted in ``(t_i - 60 s, t_i]``; the largest of each over ``i`` is the most any window of a
minute held (a window's count only grows until it ends at an accepted request).
"""

from __future__ import annotations

import numpy as np

from simulator.config.api_limits import MINUTE_S
from simulator.records.store import ApiRecords, FloatArray
from simulator.results.summary import ApiSummary


def trailing_minute(times_s: FloatArray, tokens: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Requests and tokens accepted in the minute up to and including each accepted request
    (``times_s`` non-decreasing, as the run appends them)."""
    first = np.searchsorted(times_s, times_s - MINUTE_S, side="right")
    cumulative = np.concatenate([[0.0], np.cumsum(tokens)])
    index = np.arange(times_s.size)
    return (index - first + 1).astype(np.float64), cumulative[index + 1] - cumulative[first]


def api_summary(records: ApiRecords) -> ApiSummary:
    """One API backend's counts and its busiest minute (module docstring)."""
    requests, tokens = trailing_minute(records.accepted_s, records.accepted_tokens)
    return ApiSummary(
        requests_per_minute=records.requests_per_minute, tokens_per_minute=records.tokens_per_minute,
        concurrent_requests=records.concurrent_requests, accepted=int(records.accepted_s.size),
        refused=int(records.refused_s.size), retries=records.retries, failed=records.failed,
        spilled=records.spilled, peak_requests_per_minute=int(requests.max(initial=0.0)),
        peak_tokens_per_minute=float(tokens.max(initial=0.0)),
    )  # fmt: skip
