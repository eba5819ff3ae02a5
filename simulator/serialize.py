"""Deployments and estimates as JSON-ready dicts (the ``--json`` contracts of the CLI)."""

from __future__ import annotations

from simulator.analytic.estimate import Estimate, saturation_concurrency
from simulator.analytic.placement import Deployment
from simulator.analytic.step_time import COMPONENTS


def deployment_dict(d: Deployment) -> dict[str, object]:
    return {
        "hardware": d.hardware.id,
        "model": d.model.id,
        "chips": d.chips,
        "tensor_parallel": d.tensor_parallel,
        "pipeline_parallel": d.pipeline_parallel,
        "expert_parallel": d.expert_parallel,
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
    return {
        "ttft_s": e.ttft_s,
        "itl_s": e.itl_s,
        "e2e_s": e.e2e_s,
        "per_user_output_tok_s": e.per_user_output_tok_s,
        "aggregate_output_tok_s": e.aggregate_output_tok_s,
        "concurrency": e.concurrency,
        "max_concurrency": saturation_concurrency(d, e.input_tokens, e.output_tokens),
        "input_tokens": e.input_tokens,
        "output_tokens": e.output_tokens,
        "chips": d.chips,
        "deployment": deployment_dict(d),
        "breakdown": {k: e.decode_step.components_s[k] for k in COMPONENTS},
        "bottleneck": e.bottleneck,
        "explanation": e.explanation(),
    }
