"""Report sections of fleets as they run: a hosted API's rate limits, and power caps.

Called by :mod:`simulator.report` for a run (:func:`run_sections`) and a run sweep
(:func:`sweep_sections`); each returns nothing for results without an ``api`` or ``power``
section, so other reports are unchanged. Captions go through the report's ``captioned``
(what was simulated); each takeaway is read off the numbers shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from simulator.report import fleet_plots
from simulator.report.html import Section
from simulator.results.summary import ApiSummary, BackendPower, RunSummary
from simulator.tables import format_number
from simulator.units import format_seconds

Captioned = Callable[[str], str]
API_HEADERS = ["backend", "RPM / TPM / concurrent limit", "accepted", "429s", "retries", "failed", "spilled",
               "peak requests / min", "peak tokens / min"]  # fmt: skip
POWER_HEADERS = ["backend", "cap (W)", "busy / idle (W)", "throughput share", "energy (kJ)", "mean power (kW)",
                 "J / output token", "output tok/s per kW"]  # fmt: skip


def _limit(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _api_row(name: str, a: ApiSummary) -> list[object]:
    limits = " / ".join(_limit(v) for v in (a.requests_per_minute, a.tokens_per_minute, a.concurrent_requests))
    return [name, limits, a.accepted, a.refused, a.retries, a.failed, a.spilled, a.peak_requests_per_minute,
            format_number(a.peak_tokens_per_minute, ",.0f")]  # fmt: skip


def _power_row(name: str, p: BackendPower) -> list[object]:
    return [name, format_number(p.cap_w, ",.0f"), f"{p.busy_w:,.0f} / {p.idle_w:,.0f}",
            format_number(p.throughput_share, ".3f"), format_number(p.energy_j / 1e3, ",.1f"),
            format_number(p.mean_power_w / 1e3, ",.2f"), format_number(p.joules_per_output_token, ".3g"),
            format_number(p.output_tok_s_per_kw, ",.0f")]  # fmt: skip


def _api_takeaway(name: str, a: ApiSummary) -> str:
    tpm = f" of {a.tokens_per_minute:,}" if a.tokens_per_minute else ""
    fate = (f"{a.refused:,} requests were answered 429, {a.retries:,} sent again and {a.failed:,} failed"
            if a.refused else "no request was answered 429")  # fmt: skip
    spill = (f"; the router kept {a.spilled:,} requests off it while its limits would have refused them"
             if a.spilled else "")  # fmt: skip
    return (f"{name} accepted {a.accepted:,} requests, at most {format_number(a.peak_tokens_per_minute, ',.0f')}"
            f"{tpm} tokens in any minute; {fate}{spill}.")  # fmt: skip


def run_sections(label: str, summary: RunSummary, captioned: Captioned) -> list[Section]:
    """A run's rate-limited APIs (table and figure) and power-capped backends (table)."""
    sections: list[Section] = []
    if summary.api:
        first = next(iter(summary.api.items()))
        sections.append(Section(
            f"{label}: rate-limited APIs", (API_HEADERS, [_api_row(n, a) for n, a in summary.api.items()]),
            caption=captioned("Each API backend with limits over the whole run: its requests-per-minute, "
                              "tokens-per-minute and concurrency limits, what it accepted, the 429 answers, the "
                              "client's retries and failures, the requests the router spilled elsewhere, and its "
                              "busiest trailing minute (simulator/config/api_limits.py gives the sources)."),
            takeaway=_api_takeaway(*first),
        ))  # fmt: skip
        sections.append(Section(
            f"{label}: what the API's limits did", figure=fleet_plots.api_limits({first[0]: first[1]}),
            caption=captioned(f"Requests {first[0]} accepted, answered 429, retried, failed and had spilled over "
                              "the whole run (a 429 is either retried or ends its request)."),
            takeaway=_api_takeaway(*first),
        ))  # fmt: skip
    if summary.power:
        name, p = next(iter(summary.power.items()))
        sections.append(Section(
            f"{label}: power", (POWER_HEADERS, [_power_row(n, q) for n, q in summary.power.items()]),
            caption=captioned("Each power-capped backend over the whole run: its chips draw the cap (or their full "
                              "power, if lower) while busy and their idle power otherwise; energy is that power "
                              "integrated over the run (simulator/analytic/power.py). The step-time stretch is the "
                              "hardware's power-cap curve at the cap, a full-load curve: an upper bound for "
                              "memory-bound decode."),
            takeaway=f"At {p.cap_w:,.0f} W per chip {name} keeps {p.throughput_share:.1%} of its uncapped "
                     f"throughput and uses {format_number(p.joules_per_output_token, '.3g')} J per output token "
                     f"({format_number(p.output_tok_s_per_kw, ',.0f')} output tok/s per kW of cap).",
        ))  # fmt: skip
    return sections


def sweep_sections(labels: Sequence[str], summaries: Sequence[RunSummary], captioned: Captioned) -> list[Section]:
    """A sweep's runs side by side: the API's limits at work per run, and the fleet against its power cap."""
    found = (_sweep_api_section(labels, summaries, captioned), _sweep_power_section(summaries, captioned))
    return [section for section in found if section is not None]


def _sweep_api_section(labels: Sequence[str], summaries: Sequence[RunSummary], captioned: Captioned) -> Section | None:
    """Per run, what the rate-limited API accepted, refused, retried and spilled (None without an API)."""

    apis = {label: next(iter(s.api.values())) for label, s in zip(labels, summaries, strict=True) if s.api}
    if not apis:
        return None
    failed = {label: a.failed for label, a in apis.items()}
    worst = max(failed, key=lambda k: failed[k])
    return Section(
        "Rate-limited API per run", figure=fleet_plots.api_limits(apis),
        caption=captioned("Per run, the requests the API accepted, answered 429, retried, failed and had "
                          "spilled over the whole run."),
        takeaway=f"Most failures: {worst} ({failed[worst]:,} requests failed after their retries); "
                 + "; ".join(f"{k}: {a.accepted:,} accepted, {a.spilled:,} spilled" for k, a in apis.items())
                 + ".",
    )  # fmt: skip


def _runs_by_cap(summaries: Sequence[RunSummary]) -> list[tuple[float, BackendPower, RunSummary]]:
    """``(cap W, power, summary)`` of each run, by cap; empty unless every run has a power cap
    and they differ."""
    powers = [next(iter(s.power.values())) if s.power else None for s in summaries]
    if not (all(p is not None for p in powers) and len({p.cap_w for p in powers if p}) > 1):
        return []
    return sorted((p.cap_w, p, s) for p, s in zip(powers, summaries, strict=True) if p is not None)


def _sweep_power_section(summaries: Sequence[RunSummary], captioned: Captioned) -> Section | None:
    """The same fleet at each per-chip power cap (None unless every run has a power cap and they differ)."""

    runs = _runs_by_cap(summaries)
    if not runs:
        return None
    caps = [c for c, _, _ in runs]
    joules = [p.joules_per_output_token for _, p, _ in runs]
    per_kw = [p.output_tok_s_per_kw for _, p, _ in runs]
    tpot = [s.tpot_s.p50 for _, _, s in runs]
    low, high = runs[0], runs[-1]
    return Section(
        "Power caps", figure=fleet_plots.power_caps(caps, joules, per_kw, tpot),
        caption=captioned("The same fleet at each per-chip power cap: J per output token and output tok/s "
                          "per W of cap (left axis) and the median time per output token (right axis); busy "
                          "chips draw the cap, idle ones their idle power, and steps stretch by the "
                          "hardware's power-cap curve (a full-load curve: an upper bound for decode)."),
        takeaway=f"From {high[0]:,.0f} W to {low[0]:,.0f} W per chip: J per output token "
                 f"{format_number(high[1].joules_per_output_token, '.3g')} -> "
                 f"{format_number(low[1].joules_per_output_token, '.3g')}, TPOT p50 "
                 f"{format_seconds(high[2].tpot_s.p50)} -> {format_seconds(low[2].tpot_s.p50)}.",
    )  # fmt: skip
