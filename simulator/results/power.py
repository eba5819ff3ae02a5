"""Energy of power-capped backends: the integral of their chips' power over the run.

Each chip of a capped backend draws ``busy_w`` while its replica runs an iteration and ``idle_w``
otherwise (:mod:`simulator.analytic.power`), so over the whole run ``[0, T]``

    energy_j = sum over replicas of chips * (busy_w * B_r + idle_w * (T - B_r))

with ``B_r`` replica ``r``'s busy seconds (the sum of its iterations' durations). Figures per
token and per kW use the output tokens of the same span: ``J/token = energy_j / tokens`` and
``tok/s per kW = (tokens / T) / (chips * cap_w / 1000)``, the throughput the cap's provisioned
power buys. These are chip energies over the whole run; a capped backend's ``cost.joules`` is
the same power over the measured window times the facility's PUE (an uncapped one's stays
:func:`simulator.analytic.economics.energy_joules`: profile power while busy, ``idle_power_fraction``
of it while idle).
"""

from __future__ import annotations

import math

from simulator.analytic.power import replica_energy_j
from simulator.records.store import BackendRecord, RunRecords
from simulator.results.summary import BackendPower


def backend_power(records: RunRecords, backend: BackendRecord) -> BackendPower:
    """The energy figures of one capped backend (module docstring)."""
    chip = backend.power
    assert chip is not None
    span = records.end_s
    energy = sum(replica_energy_j(chip, backend.chips_per_replica, records.totals[i].busy_s, span)
                 for i in backend.replicas)  # fmt: skip
    tokens, _ = records.tokens_in_window(0.0, span, backend.replicas)
    chips = backend.chips_per_replica * len(backend.replicas)
    undefined = {}
    if not tokens:
        undefined["joules_per_output_token"] = "no output token was emitted"
    if span <= 0:
        undefined |= dict.fromkeys(("mean_power_w", "output_tok_s_per_kw"), "the run has no duration")
    return BackendPower(
        cap_w=chip.cap_w, busy_w=chip.busy_w, idle_w=chip.idle_w, throughput_share=chip.throughput, chips=chips,
        energy_j=energy,
        mean_power_w=energy / span if span > 0 else math.nan,
        joules_per_output_token=energy / tokens if tokens else math.nan,
        output_tok_s_per_kw=tokens / span / (chips * chip.cap_w / 1000.0) if span > 0 and chips else math.nan,
        undefined=undefined or None,
    )  # fmt: skip


def power_summaries(records: RunRecords) -> dict[str, BackendPower]:
    """Each power-capped backend's energy figures, by name (empty when none is capped)."""
    return {b.name: backend_power(records, b) for b in records.backends if b.power is not None}
