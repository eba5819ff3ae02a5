"""The page of the demo (``infersim demo``): the speed gap per model, the roofline of the first model's
deployments, then the agents under load (its ``agents/`` folder, a comparison)."""

from __future__ import annotations

from typing import Any

from simulator.analytic.estimate import estimate
from simulator.analytic.layouts import deploy
from simulator.capacity import LIMITED_MARK, Capacity
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog
from simulator.report import compare, plots
from simulator.report.captions import best, best_under_load, caption, closed_form_assumptions
from simulator.report.html import Section
from simulator.report.reading import read_rows, read_text_file
from simulator.results.marker import Manifest

#: Deployments the demo report draws on its roofline (one per architecture family).
ROOFLINE_HARDWARE = ("cerebras-cs3", "groq-lpu", "sambanova-sn40l", "nvidia-h100-sxm")
#: The batch sizes the roofline draws operating points at.
ROOFLINE_BATCHES = (1, 16, 128)
#: The sub-folder holding the agents under load, and the command whose results it holds.
AGENTS = ("agents", "compare")


def page(manifest: Manifest) -> list[Section]:
    """The speed gap and roofline (``speed_gap.json``), then the agents' comparison when it ran."""
    sections = speed_gap_sections(manifest) if manifest.has("speed_gap.json") else []
    return sections + compare.page(manifest.sub(*AGENTS))


def speed_gap_sections(manifest: Manifest) -> list[Section]:
    """The speed-gap table and chart per model, and the roofline of the first model's deployments."""
    rows = read_rows(manifest, "speed_gap.json", ("model", "hardware"))
    fitted = [r for r in rows if "single_stream" in r]
    models = list(dict.fromkeys(r["model"] for r in rows))
    first = fitted[0]["single_stream"]
    users = fitted[0]["loaded"]["concurrency"]
    lengths = (first["input_tokens"], first["output_tokens"])
    sections = [_model_section(model, [r for r in fitted if r["model"] == model], lengths, users) for model in models]
    table = _table_section(manifest, rows, fitted, models, lengths, users)
    deployments = [r["single_stream"]["deployment"] for r in fitted if r["model"] == models[0]]
    return [table, *sections, _roofline_section(models[0], deployments)]


def _table_section(
    manifest: Manifest,
    rows: list[dict[str, Any]],
    fitted: list[dict[str, Any]],
    models: list[str],
    lengths: tuple[int, int],
    users: int,
) -> Section:
    """The speed-gap table: how many pairs do not fit, and how many are capacity-limited under load."""
    table_a = closed_form_assumptions(", ".join(models), ["every bundled hardware profile"], *lengths, (1, users))
    what = (
        "Per-user speed, TTFT and aggregate throughput of each model on each hardware; "
        f"{LIMITED_MARK} marks capacity-limited figures."
    )
    limited = sum(1 for r in fitted if r["loaded"].get("capacity_limited"))
    return Section(
        "The speed gap (table)",
        text=read_text_file(manifest, "speed_gap.txt"),
        caption=caption(what, table_a),
        takeaway=f"{sum(1 for r in rows if 'error' in r)} model-hardware pairs do not fit; "
        f"{limited} are capacity-limited at {users} users ({LIMITED_MARK}).",
    )


def _model_section(model: str, mine: list[dict[str, Any]], lengths: tuple[int, int], users: int) -> Section:
    """One model's per-user speed on each hardware, alone and with ``users`` users."""
    a = closed_form_assumptions(model, [r["hardware"] for r in mine], *lengths, (1, users))
    fits = {
        r["hardware"]: (r["single_stream"]["per_user_output_tok_s"], r["loaded"]["per_user_output_tok_s"]) for r in mine
    }
    limited = [r["hardware"] for r in mine if r["loaded"].get("capacity_limited")]
    capacities = {r["hardware"]: Capacity(r["loaded"]["concurrency"], r["loaded"]["max_concurrency"]) for r in mine}
    alone = {h: v[0] for h, v in fits.items()}
    loaded = {h: v[1] for h, v in fits.items()}
    note = (
        f" Hatched: the KV cache of {', '.join(limited)} holds fewer than {users} users; the bar is the "
        f"speed of those that fit, the rest queue."
        if limited
        else ""
    )
    what = f"Per-user output speed of {model} on each hardware, alone and with {users} users." + note
    return Section(
        f"The speed gap: {model}",
        figure=plots.speed_gap(fits, model, users, capacity_limited=limited),
        caption=caption(what, a),
        takeaway=f"{model}: alone, {best(alone, 'tok/s', 'per-user speed')}; with {users} users, "
        f"{best_under_load(loaded, capacities, 'tok/s', 'per-user speed', per_user_speed=True)}.",
        headline=True,
    )


def _roofline_section(model: str, deployments: list[dict[str, Any]]) -> Section:
    """The roofline of the model's deployments on :data:`ROOFLINE_HARDWARE`, and what bounds batch 1."""
    catalog = Catalog()
    chosen = {
        d["hardware"]: deploy(
            catalog,
            DeploymentSpec(hardware=d["hardware"], model=d["model"], chips=d["chips"], weights=d["weights"]),
        )
        for d in deployments
        if d["hardware"] in ROOFLINE_HARDWARE
    }
    bounds = {hw: estimate(d, *plots.ROOFLINE_TOKENS, 1).bottleneck for hw, d in chosen.items()}
    roof_a = closed_form_assumptions(model, list(chosen), *plots.ROOFLINE_TOKENS, ROOFLINE_BATCHES)
    what = (
        "Each deployment's per-chip roof (solid), its decode operating points (dashed, batch 1, 16, 128) and its "
        "latency ceiling (dotted: the FLOP/s a pass would reach in only its fixed, fabric, hop and collective "
        "time; every point lies on or under it)."
    )
    return Section(
        f"Roofline: {model} at batch 1, 16 and 128",
        figure=plots.roofline(chosen, ROOFLINE_BATCHES),
        caption=caption(what, roof_a),
        takeaway="At batch 1 the decode pass is bound by "
        + ", ".join(f"{kind.replace('_', ' ')} on {hw}" for hw, kind in bounds.items())
        + ".",
    )
