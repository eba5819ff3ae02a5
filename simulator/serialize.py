"""Deployments and estimates as JSON-ready dicts (the ``--json`` contracts of the CLI)."""

from __future__ import annotations

import math
from typing import Any

from simulator.analytic.estimate import Estimate
from simulator.analytic.layouts import LayoutChoice
from simulator.analytic.placement import Deployment
from simulator.analytic.step_time import COMPONENTS


def deployment_dict(d: Deployment) -> dict[str, object]:
    return {
        "hardware": d.hardware.id,
        "model": d.model.id,
        "stack": d.stack.id,
        "chips": d.chips,
        "layout": d.layout,
        "tensor_parallel": d.tensor_parallel,
        "attention_data_parallel": d.attention_dp,
        "pipeline_parallel": d.pipeline_parallel,
        "expert_parallel": d.expert_parallel,
        "precision_by_group": dict(d.precision),
        "weights": d.weights,
        "kv_cache": d.kv_cache,
        "activations": d.activations,
        "weights_tier": d.weights_tier.name,
        "kv_tier": d.weights_tier.name,
        "weight_bytes": d.weight_bytes,
        "kv_budget_bytes": d.kv_budget_bytes,
        "max_kv_tokens": d.max_kv_tokens,
        "resident_models_capacity_bytes": d.resident_models_capacity_bytes,
    }


def estimate_dict(e: Estimate) -> dict[str, object]:
    d = e.deployment
    out: dict[str, object] = {
        "ttft_s": e.ttft_s,
        "itl_s": e.itl_s,
        "e2e_s": e.e2e_s,
        "per_user_output_tok_s": e.per_user_output_tok_s,
        "aggregate_output_tok_s": e.aggregate_output_tok_s,
        "concurrency": e.concurrency,
        "max_concurrency": e.max_concurrency,
        "capacity_limited": e.capacity_limited,
        "queueing_delay_s": e.queueing_s,
        "running_sequences": e.running,
        "input_tokens": e.input_tokens,
        "output_tokens": e.output_tokens,
        "chips": d.chips,
        "deployment": deployment_dict(d),
        "breakdown": {k: e.decode_step.components_s[k] for k in COMPONENTS},
        "bottleneck": e.bottleneck,
        "explanation": e.explanation(),
        "api_time_s": d.api_s,
        "replica_chips": d.replica_chips,
        "notes": [note for note in (e.capacity_note(), _one_token_note(e), placement_note(e)) if note],
    }
    if e.itl_s is None:
        out["undefined"] = dict.fromkeys(("itl_s", "per_user_output_tok_s"), _one_token_note(e))
    return out


def layout_dict(choice: LayoutChoice) -> dict[str, object]:
    """The layouts tried for a question, best first, with the metric each scored."""
    return {
        "metric": choice.question.metric,
        "chosen": choice.deployment.layout,
        "candidates": [{"layout": c.deployment.layout, "score": c.score} for c in choice.ranked],
    }


def placement_note(e: Estimate) -> str:
    """Where the time and chips go beyond the replica's own (a hosted API, a draft on its own chips)."""
    d = e.deployment
    notes = []
    if d.api_s > 0:
        notes.append(f"TTFT and E2E include {d.api_s * 1e3:.0f} ms outside the replica ({d.stack.id}'s API round "
                     "trip and front end; per-user speed excludes it)")  # fmt: skip
    if d.draft is not None and d.draft_chips:
        notes.append(f"the draft {d.draft.model.id} runs on {d.draft_chips} chips of its own "
                     f"({d.replica_chips} in all)")  # fmt: skip
    return "; ".join(notes)


def _one_token_note(e: Estimate) -> str:
    return "a 1-token answer has no inter-token latency: ITL and per-user speed are null" if e.itl_s is None else ""


#: Why a number is undefined, when nothing more specific was recorded beside it.
UNDEFINED_REASON = "undefined: no data to compute it from (e.g. nothing measured in the window)"


def _strict_mapping(value: dict[Any, object]) -> dict[str, object]:
    """:func:`strict_json` of a mapping: each non-finite number's key gains a reason under
    ``undefined`` (the one given there, else :data:`UNDEFINED_REASON`)."""
    out: dict[str, object] = {}
    given = value.get("undefined", {})
    reasons: dict[str, str] = dict(given) if isinstance(given, dict) else {}
    for key, item in value.items():
        if key == "undefined":
            continue
        if isinstance(item, float) and not math.isfinite(item):
            reasons.setdefault(str(key), UNDEFINED_REASON)
        out[str(key)] = strict_json(item)
    if reasons:
        out["undefined"] = reasons
    return out


def strict_json(value: object) -> object:
    """A copy of ``value`` that strict JSON can hold: NaN and infinities become ``null``.

    A mapping that held such a number gains ``"undefined": {key: reason}`` beside it (the
    reason already given there, or :data:`UNDEFINED_REASON`), so a reader sees why.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return _strict_mapping(value)
    if isinstance(value, list | tuple):
        return [strict_json(item) for item in value]
    return value
