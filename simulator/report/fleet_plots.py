"""Figures of fleets as they run: a hosted API's rate limits at work, and a fleet at power caps.

Like :mod:`simulator.report.plots`: each function takes results and an optional Axes, draws, labels the
axes with their units, and returns the Axes; it never saves or shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes

from simulator.report.plots import _axes, _legend
from simulator.results.summary import ApiSummary

#: The counts an API backend's bars show, in order: (field of ApiSummary, legend label).
API_COUNTS = (
    ("accepted", "accepted by the API"),
    ("refused", "answered 429"),
    ("retries", "sent again after a 429"),
    ("failed", "failed: retries spent"),
    ("spilled", "kept off it by the router (spill)"),
)


def api_limits(runs: Mapping[str, ApiSummary], ax: Axes | None = None) -> Axes:
    """Per run (a group of bars): what the rate-limited API accepted, refused, retried, failed and had
    spilled (counts over the whole run)."""
    ax = _axes(ax)
    labels = list(runs)
    x = np.arange(len(labels))
    width = 0.8 / len(API_COUNTS)
    for i, (name, label) in enumerate(API_COUNTS):
        ax.bar(x + (i - (len(API_COUNTS) - 1) / 2) * width, [getattr(runs[k], name) for k in labels], width,
               label=label, color=f"C{i}")  # fmt: skip
    ax.set_xticks(x, labels)
    ax.set_ylabel("requests (whole run)")
    ax.set_title("A rate-limited API: accepted, refused and spilled requests")
    _legend(ax)
    return ax


def power_caps(caps_w: Sequence[float], joules_per_token: Sequence[float], tok_s_per_kw: Sequence[float],
               tpot_p50_s: Sequence[float], ax: Axes | None = None) -> Axes:  # fmt: skip
    """Against the per-chip power cap: J per output token and output tok/s per kW of cap (left), the
    median time per output token (right)."""
    ax = _axes(ax)
    ax.plot(caps_w, joules_per_token, "o-", color="C0", label="J per output token")
    ax.plot(caps_w, np.asarray(tok_s_per_kw) / 1000.0, "s-", color="C2", label="output tok/s per W of cap")
    ax.set_xlabel("power cap per chip (W)")
    ax.set_ylabel("J / token; tok/s per W")
    ax.set_ylim(bottom=0)
    ax.set_title("The same fleet at each power cap")
    twin = ax.twinx()
    twin.plot(caps_w, np.asarray(tpot_p50_s) * 1e3, "D--", color="C3", label="TPOT p50 (ms, right axis)")
    twin.set_ylabel("TPOT p50 (ms)")
    twin.set_ylim(bottom=0)
    _legend(ax, [twin])
    return ax
